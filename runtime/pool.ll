; The worker pool's native code (runtime/pool.py, `render`): LLVM IR with placeholders.
;
; `render` fills each ${NAME} (string.Template) and drops the lines that start with ";"
; (these comments). The placeholders:
;   ${pause}               one spin-wait pause: x86's `pause`, or a fence elsewhere
;   ${GEN} .. ${SLOTS}     word offsets in the shared array (`Layout`), and in a worker's
;   ${SEQ} .. ${MOST}      slot; ${SLOT_SLEEPING} is SLOTS + SLEEPING
;   ${SLOT_WORDS}          the words of one worker's slot
;   ${argument_loads}      fg_pool_do's loads of the job's MAX_ARGS arguments (%a0 ..)
;   ${signature}           the called function's parameter types; ${arguments} the loads
;   ${claim_chunks}        the loop claiming a kernel's chunks (`claim_loop_ir`)
;   ${FUTEX_WAIT_PRIVATE}, ${FUTEX_WAKE_PRIVATE}, ${CALLER_SPINS}: as in runtime/pool.py
;
; fg_pool_do(pool, fn, tid, n, ext, least, most): one thread's part of a job. A kernel's
; loop is claimed in chunks from the shared counter, so a thread that starts late (a
; sleeping CPU takes long to wake) or is preempted takes fewer chunks instead of holding
; up the others; a program (ext -1) is called once as fn(tid, n, ...).
define internal void @fg_pool_do(ptr %pool, ptr %fn, i64 %tid, i64 %n, i64 %ext, i64 %least, i64 %most) nounwind {
entry:
${argument_loads}
  %next = getelementptr inbounds i64, ptr %pool, i64 ${NEXT}
  %cancel = getelementptr inbounds i64, ptr %pool, i64 ${CANCEL}
  %prog = icmp slt i64 %ext, 0
  br i1 %prog, label %program, label %chunks
program:
  call void (${signature}) %fn(i64 %tid, i64 %n, ${arguments})
  ret void
chunks:
${claim_chunks}
done:
  ret void
}
;
; ---- the worker: wait for a job, run it, say so; until a null job (closing)
define void @fg_pool_worker(ptr %pool, i64 %w) nounwind {
entry:
  %seen.a = alloca i64
  %until.a = alloca i64
  %slot.o1 = mul i64 %w, ${SLOT_WORDS}
  %slot.o2 = add i64 %slot.o1, ${SLOTS}
  %slot = getelementptr inbounds i64, ptr %pool, i64 %slot.o2
  %seq.p = getelementptr inbounds i64, ptr %slot, i64 ${SEQ}
  %done.p = getelementptr inbounds i64, ptr %slot, i64 ${DONE}
  %sleep.p = getelementptr inbounds i64, ptr %slot, i64 ${SLEEPING}
  %fn.p = getelementptr inbounds i64, ptr %slot, i64 ${FN}
  %n.p = getelementptr inbounds i64, ptr %slot, i64 ${N}
  %ext.p = getelementptr inbounds i64, ptr %slot, i64 ${EXTENT}
  %tid.p = getelementptr inbounds i64, ptr %slot, i64 ${TID}
  %least.p = getelementptr inbounds i64, ptr %slot, i64 ${LEAST}
  %most.p = getelementptr inbounds i64, ptr %slot, i64 ${MOST}
  %jobspin.p = getelementptr inbounds i64, ptr %pool, i64 ${JOB_SPIN}
  %wakespin.p = getelementptr inbounds i64, ptr %pool, i64 ${WAKE_SPIN}
  %sys.p = getelementptr inbounds i64, ptr %pool, i64 ${SYSCALL}
  %nr.p = getelementptr inbounds i64, ptr %pool, i64 ${FUTEX_NR}
; the jobs it has seen are those it has done: a job posted before this thread got going
; is still new to it
  %s0 = load atomic i64, ptr %done.p acquire, align 8
  store i64 %s0, ptr %seen.a
  %t0 = call i64 @llvm.readcyclecounter()
  %js0 = load i64, ptr %jobspin.p
  %u0 = add i64 %t0, %js0
  store i64 %u0, ptr %until.a
  br label %poll
poll:
  %seen = load i64, ptr %seen.a
  %q = load atomic i64, ptr %seq.p acquire, align 8
  %new = icmp ne i64 %q, %seen
  br i1 %new, label %job, label %idle
idle:
  %now = call i64 @llvm.readcyclecounter()
  %until = load i64, ptr %until.a
  %early = icmp ult i64 %now, %until
  br i1 %early, label %pause, label %sleep
pause:
  ${pause}
  br label %poll
; sleeping: say so, then look once more (the caller, having posted a job, looks at
; `sleeping` after a fence: one of the two sees the other's store)
sleep:
  %g = load atomic i32, ptr %pool acquire, align 8
  store atomic i64 1, ptr %sleep.p seq_cst, align 8
  fence seq_cst
  %q2 = load atomic i64, ptr %seq.p seq_cst, align 8
  %still = icmp eq i64 %q2, %seen
  br i1 %still, label %futex, label %woke
futex:
  %sys = load ptr, ptr %sys.p
  %nr = load i64, ptr %nr.p
  %g64 = zext i32 %g to i64
  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %pool, i64 ${FUTEX_WAIT_PRIVATE}, i64 %g64, ptr null, ptr null, i64 0)
  br label %woke
woke:
  store atomic i64 0, ptr %sleep.p seq_cst, align 8
  %t1 = call i64 @llvm.readcyclecounter()
  %ws = load i64, ptr %wakespin.p
  %u1 = add i64 %t1, %ws
  store i64 %u1, ptr %until.a
  br label %poll
job:
  store i64 %q, ptr %seen.a
  %fn = load ptr, ptr %fn.p
; a null function: the pool is closing
  %quit = icmp eq ptr %fn, null
  br i1 %quit, label %exit, label %run
exit:
  store atomic i64 %q, ptr %done.p release, align 8
  ret void
run:
  %n = load i64, ptr %n.p
  %ext = load i64, ptr %ext.p
  %tid = load i64, ptr %tid.p
  %least = load i64, ptr %least.p
  %most = load i64, ptr %most.p
  call void @fg_pool_do(ptr %pool, ptr %fn, i64 %tid, i64 %n, i64 %ext, i64 %least, i64 %most)
  store atomic i64 %q, ptr %done.p release, align 8
  %t2 = call i64 @llvm.readcyclecounter()
  %js = load i64, ptr %jobspin.p
  %u2 = add i64 %t2, %js
  store i64 %u2, ptr %until.a
  br label %poll
}
;
; ---- waking every sleeping worker among the first %k (shared by run and prewake)
define internal void @fg_pool_wake(ptr %pool, i64 %k) nounwind {
entry:
  fence seq_cst
  br label %test
test:
  %i = phi i64 [0, %entry], [%i.n, %next]
  %more = icmp ult i64 %i, %k
  br i1 %more, label %look, label %none
look:
  %sp.o1 = mul i64 %i, ${SLOT_WORDS}
  %sp.o2 = add i64 %sp.o1, ${SLOT_SLEEPING}
  %sp = getelementptr inbounds i64, ptr %pool, i64 %sp.o2
  %s = load atomic i64, ptr %sp seq_cst, align 8
  %i.n = add i64 %i, 1
  %asleep = icmp ne i64 %s, 0
  br i1 %asleep, label %wake, label %next
next:
  br label %test
wake:
  %old = atomicrmw add ptr %pool, i32 1 seq_cst
  %sys.p = getelementptr inbounds i64, ptr %pool, i64 ${SYSCALL}
  %nr.p = getelementptr inbounds i64, ptr %pool, i64 ${FUTEX_NR}
  %sys = load ptr, ptr %sys.p
  %nr = load i64, ptr %nr.p
  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %pool, i64 ${FUTEX_WAKE_PRIVATE}, i64 2147483647, ptr null, ptr null, i64 0)
  ret void
none:
  ret void
}
;
; ---- pre-waking: refused (1) when the caller has moved to another CPU, as a run is: a
; worker woken on the caller's CPU would spin there, in the caller's way
define i64 @fg_pool_prewake(ptr %pool, i64 %k) nounwind {
entry:
  %getcpu.p = getelementptr inbounds i64, ptr %pool, i64 ${GETCPU}
  %placed.p = getelementptr inbounds i64, ptr %pool, i64 ${PLACED_CPU}
  %getcpu = load ptr, ptr %getcpu.p
  %cpu = call i32 %getcpu()
  %cpu64 = sext i32 %cpu to i64
  %placed = load i64, ptr %placed.p
  %moved = icmp ne i64 %cpu64, %placed
  br i1 %moved, label %refuse, label %wake
refuse:
  ret i64 1
wake:
  call void @fg_pool_wake(ptr %pool, i64 %k)
  ret i64 0
}
;
; ---- closing: a null job for each of the first %k workers, then wake them all
define void @fg_pool_close(ptr %pool, i64 %k) nounwind {
entry:
  br label %test
test:
  %i = phi i64 [0, %entry], [%i.n, %body]
  %more = icmp ult i64 %i, %k
  br i1 %more, label %body, label %wake
body:
  %s.o1 = mul i64 %i, ${SLOT_WORDS}
  %s.o2 = add i64 %s.o1, ${SLOTS}
  %s = getelementptr inbounds i64, ptr %pool, i64 %s.o2
  %fnp = getelementptr inbounds i64, ptr %s, i64 ${FN}
  store ptr null, ptr %fnp
  %sq = load atomic i64, ptr %s monotonic, align 8
  %sq.n = add i64 %sq, 1
  store atomic i64 %sq.n, ptr %s release, align 8
  %i.n = add i64 %i, 1
  br label %test
wake:
  call void @fg_pool_wake(ptr %pool, i64 %k)
  ret void
}
define i64 @fg_pool_cycles() nounwind {
entry:
  %c = call i64 @llvm.readcyclecounter()
  ret i64 %c
}
;
; ---- the caller: post the job to workers 0 .. n-2, run slice 0, wait for the rest.
; Returns 1 (and runs nothing) when the caller is no longer on the CPU the workers were
; placed off.
define i64 @fg_pool_run(ptr %pool, ptr %fn, i64 %n, i64 %ext, i64 %least, i64 %most) nounwind {
entry:
  %getcpu.p = getelementptr inbounds i64, ptr %pool, i64 ${GETCPU}
  %placed.p = getelementptr inbounds i64, ptr %pool, i64 ${PLACED_CPU}
  %yield.p = getelementptr inbounds i64, ptr %pool, i64 ${YIELD}
  %getcpu = load ptr, ptr %getcpu.p
  %cpu = call i32 %getcpu()
  %cpu64 = sext i32 %cpu to i64
  %placed = load i64, ptr %placed.p
  %moved = icmp ne i64 %cpu64, %placed
  br i1 %moved, label %refuse, label %post
refuse:
  ret i64 1
post:
  %next = getelementptr inbounds i64, ptr %pool, i64 ${NEXT}
; published to the workers by each slot's release store
  store i64 0, ptr %next
  %workers = sub i64 %n, 1
  br label %ptest
ptest:
  %i = phi i64 [0, %post], [%i.n, %pbody]
  %pmore = icmp ult i64 %i, %workers
  br i1 %pmore, label %pbody, label %posted
pbody:
  %ps.o1 = mul i64 %i, ${SLOT_WORDS}
  %ps.o2 = add i64 %ps.o1, ${SLOTS}
  %ps = getelementptr inbounds i64, ptr %pool, i64 %ps.o2
  %pseq = getelementptr inbounds i64, ptr %ps, i64 ${SEQ}
  %pfn = getelementptr inbounds i64, ptr %ps, i64 ${FN}
  %pn = getelementptr inbounds i64, ptr %ps, i64 ${N}
  %pext = getelementptr inbounds i64, ptr %ps, i64 ${EXTENT}
  %ptid = getelementptr inbounds i64, ptr %ps, i64 ${TID}
  %pleast = getelementptr inbounds i64, ptr %ps, i64 ${LEAST}
  %pmost = getelementptr inbounds i64, ptr %ps, i64 ${MOST}
  store ptr %fn, ptr %pfn
  store i64 %n, ptr %pn
  store i64 %ext, ptr %pext
  store i64 %least, ptr %pleast
  store i64 %most, ptr %pmost
  %i.n = add i64 %i, 1
  store i64 %i.n, ptr %ptid
  %sq = load atomic i64, ptr %pseq monotonic, align 8
  %sq.n = add i64 %sq, 1
  store atomic i64 %sq.n, ptr %pseq release, align 8
  br label %ptest
posted:
  call void @fg_pool_wake(ptr %pool, i64 %workers)
  call void @fg_pool_do(ptr %pool, ptr %fn, i64 0, i64 %n, i64 %ext, i64 %least, i64 %most)
  br label %jtest
jtest:
  %j = phi i64 [0, %posted], [%j.n, %jdone]
  %jmore = icmp ult i64 %j, %workers
  br i1 %jmore, label %jbody, label %joined
jbody:
  %js.o1 = mul i64 %j, ${SLOT_WORDS}
  %js.o2 = add i64 %js.o1, ${SLOTS}
  %js = getelementptr inbounds i64, ptr %pool, i64 %js.o2
  %jseq = getelementptr inbounds i64, ptr %js, i64 ${SEQ}
  %jdonep = getelementptr inbounds i64, ptr %js, i64 ${DONE}
  %want = load atomic i64, ptr %jseq monotonic, align 8
  br label %jwait
jwait:
  %spins = phi i64 [0, %jbody], [%spins.n, %jpause], [0, %jyield]
  %d = load atomic i64, ptr %jdonep acquire, align 8
  %finished = icmp eq i64 %d, %want
  br i1 %finished, label %jdone, label %jspin
jspin:
  %spins.n = add i64 %spins, 1
  %long = icmp ugt i64 %spins.n, ${CALLER_SPINS}
  br i1 %long, label %jyield, label %jpause
jpause:
  ${pause}
  br label %jwait
jyield:
  %yield = load ptr, ptr %yield.p
  %y = call i32 %yield()
  br label %jwait
jdone:
  %j.n = add i64 %j, 1
  br label %jtest
joined:
  ret i64 0
}
