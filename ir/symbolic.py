"""Integer index expressions with known ranges, simplified as they are built.

Views are index maps: a kernel reads element `sum(coord_i * stride_i)` of a
buffer, where the coordinates come from the loop variables through every
reshape, permute, pad, ... between the kernel's output and the buffer. Every
expression here is a linear combination of *atoms* (loop variables, and floor
division or modulo of another expression by a constant), and each knows its
minimum and maximum, so that

>>> i, j = Var("i", 0, 3), Var("j", 0, 7)
>>> flat = i * 8 + j                      # merge two axes (a reshape)...
>>> (flat // 8, flat % 8)                 # ...and split them again
(i, j)

folds back to the loop variables, and a view that is really a plain strided
access renders without a single division.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_CACHED = ("_hash", "_repr", "_min", "_max")  # what an expression keeps once computed


def _state(self) -> dict:
    """An expression's fields without what it computed (a hash is of this process: a
    pickled expression read by another, from the disk cache, computes its own)."""
    return {k: v for k, v in self.__dict__.items() if k not in _CACHED}


class Atom:
    """A non-linear leaf of an expression: a variable, or `x // c`, or `x % c`."""

    min: int
    max: int

    __getstate__ = _state


@dataclass(frozen=True)
class Var(Atom):
    """A loop variable with inclusive bounds."""

    name: str
    min: int
    max: int

    def __repr__(self) -> str:
        return self.name

    def __hash__(self) -> int:
        return hash(self.name)  # (equal variables have equal names)

    # let variables take part in arithmetic directly
    def __add__(self, o):
        return lin(self) + o

    __radd__ = __add__

    def __mul__(self, o):
        return lin(self) * o

    __rmul__ = __mul__

    def __sub__(self, o):
        return lin(self) - o

    def __floordiv__(self, c):
        return lin(self) // c

    def __mod__(self, c):
        return lin(self) % c


# Expressions are immutable and built over and over while a kernel is lowered (a view's
# coordinates through every reshape): each keeps its hash, bounds and text once computed,
# in its __dict__ (beside the dataclass's fields, which alone decide equality).


class _Cut(Atom):
    """What `x // c` and `x % c` share: their text and hash, kept once computed."""

    x: Lin
    c: int
    op = ""  # "//" or "%"

    def __repr__(self) -> str:
        text = self.__dict__.get("_repr")
        if text is None:
            text = self.__dict__["_repr"] = f"({self.x}{self.op}{self.c})"
        return text

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.x, self.c, self.op))
        return h


# (repr=False, and `__hash__` named in the class: the dataclass keeps `_Cut`'s)
@dataclass(frozen=True, repr=False)
class FloorDiv(_Cut):
    x: Lin
    c: int
    op = "//"
    __hash__ = _Cut.__hash__

    @property
    def min(self) -> int:
        return self.x.min // self.c

    @property
    def max(self) -> int:
        return self.x.max // self.c


@dataclass(frozen=True, repr=False)
class Mod(_Cut):
    x: Lin
    c: int
    op = "%"
    __hash__ = _Cut.__hash__

    @property
    def min(self) -> int:
        lo, hi = self.x.min, self.x.max
        if hi - lo < self.c and lo % self.c <= hi % self.c:
            return lo % self.c
        return 0

    @property
    def max(self) -> int:
        lo, hi = self.x.min, self.x.max
        if hi - lo < self.c and lo % self.c <= hi % self.c:
            return hi % self.c
        return self.c - 1


@dataclass(frozen=True)
class Lin:
    """`const + sum(coef * atom)`, with terms in a canonical order so equal sums compare equal."""

    terms: tuple[tuple[Atom, int], ...]
    const: int

    __getstate__ = _state

    @property
    def min(self) -> int:
        lo = self.__dict__.get("_min")
        if lo is None:
            lo = self.const + sum(c * (a.min if c > 0 else a.max) for a, c in self.terms)
            self.__dict__["_min"] = lo
        return lo

    @property
    def max(self) -> int:
        hi = self.__dict__.get("_max")
        if hi is None:
            hi = self.const + sum(c * (a.max if c > 0 else a.min) for a, c in self.terms)
            self.__dict__["_max"] = hi
        return hi

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, atom: Atom) -> int:
        return dict(self.terms).get(atom, 0)

    def atoms(self) -> set[Atom]:
        """Every atom at any depth (inside divisions too)."""
        out: set[Atom] = set()
        for a, _ in self.terms:
            out.add(a)
            if isinstance(a, (FloorDiv, Mod)):
                out |= a.x.atoms()
        return out

    def has_divmod(self) -> bool:
        return any(isinstance(a, (FloorDiv, Mod)) for a in self.atoms())

    def __repr__(self) -> str:
        text = self.__dict__.get("_repr")
        if text is None:
            parts = [(f"{a}" if c == 1 else f"{a}*{c}") for a, c in self.terms]
            if self.const or not parts:
                parts.append(str(self.const))
            text = self.__dict__["_repr"] = " + ".join(parts)
        return text

    def __eq__(self, o) -> bool:
        if isinstance(o, Atom):
            o = lin(o)
        if isinstance(o, int):
            return self.is_const and self.const == o
        return isinstance(o, Lin) and self.terms == o.terms and self.const == o.const

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.terms, self.const))
        return h

    # -- arithmetic
    def __add__(self, o) -> Lin:
        if type(o) is int:  # (terms unchanged: already in order, nothing to fold)
            return Lin(self.terms, self.const + o) if o else self
        o = lin(o)
        if not o.terms:
            return Lin(self.terms, self.const + o.const)
        if not self.terms:
            return Lin(o.terms, self.const + o.const)
        coefs = dict(self.terms)
        for a, c in o.terms:
            coefs[a] = coefs.get(a, 0) + c
        return _make(coefs, self.const + o.const)

    __radd__ = __add__

    def __neg__(self) -> Lin:
        return self * -1

    def __sub__(self, o) -> Lin:
        return self + lin(o) * -1

    def __rsub__(self, o) -> Lin:
        return lin(o) - self

    def __mul__(self, k: int) -> Lin:
        assert isinstance(k, int), "index expressions only multiply by constants"
        if k == 0:
            return Lin((), 0)
        if k == 1:
            return self
        # (the same atoms in the same order; a fold needs two coefficients in a ratio that
        # scaling keeps, so none appears)
        return Lin(tuple([(a, c * k) for a, c in self.terms]), self.const * k)

    __rmul__ = __mul__

    def __floordiv__(self, c: int) -> Lin:
        assert isinstance(c, int) and c > 0
        if c == 1:
            return self
        lo, hi = self.min, self.max
        if lo // c == hi // c:  # the whole range falls in one bucket (a flipped index, say)
            return lin(lo // c)
        # split off the part that divides exactly: (q*c + r) // c == q + r // c
        # (q*c + r) // c == q + r // c for any integer q; truncating keeps small negative
        # coefficients (a flipped axis) in the remainder, where their range can cancel
        q = {a: _trunc(k, c) for a, k in self.terms if _trunc(k, c)}
        r = {a: k - _trunc(k, c) * c for a, k in self.terms if k - _trunc(k, c) * c}
        rest = _make(r, self.const % c)
        quotient = _make(q, self.const // c)
        lo, hi = rest.min, rest.max
        if lo // c == hi // c:
            return quotient + lo // c
        if len(rest.terms) == 1 and rest.const == 0 and isinstance(rest.terms[0][0], FloorDiv):
            ((inner, k),) = rest.terms
            if k == 1:  # (x // a) // c == x // (a * c)
                return quotient + lin(FloorDiv(inner.x, inner.c * c))
        split = _common_factor(rest, c)
        if split is not None:  # (a*x + y) // (a*m) == x // m  when 0 <= y < a
            a, big, _ = split
            return quotient + big // (c // a)
        if lo < 0:  # renderers divide truncating (sdiv): keep the argument >= 0
            k = -(lo // c)
            return quotient - k + lin(FloorDiv(rest + k * c, c))
        return quotient + lin(FloorDiv(rest, c))

    def __mod__(self, c: int) -> Lin:
        assert isinstance(c, int) and c > 0
        if c == 1:
            return Lin((), 0)
        if self.min // c == self.max // c:
            return self - (self.min // c) * c
        rest = _make(
            {a: k - _trunc(k, c) * c for a, k in self.terms if k - _trunc(k, c) * c},
            self.const % c,
        )
        lo, hi = rest.min, rest.max
        if lo // c == hi // c:
            return rest - (lo // c) * c
        if len(rest.terms) == 1 and rest.const == 0 and isinstance(rest.terms[0][0], Mod):
            ((inner, k),) = rest.terms
            if k == 1 and inner.c % c == 0:  # (x % (a*c)) % c == x % c
                return inner.x % c
        split = _common_factor(rest, c)
        if split is not None:  # (a*x + y) % (a*m) == (x % m)*a + y  when 0 <= y < a
            a, big, small = split
            return (big % (c // a)) * a + small
        if lo < 0:  # renderers take remainders truncating (srem): keep the argument >= 0
            rest = rest + (-(lo // c)) * c
        return lin(Mod(rest, c))

    def substitute(self, env: dict[Atom, Lin], _done: dict | None = None) -> Lin:
        """Replace variables by expressions, re-simplifying on the way up.

        A division or remainder met again inside is substituted once (`_done`, by atom):
        a strided convolution's gradient indexes through deeply nested divisions that
        repeat the same few, so substituting each anew at every use grows with the depth."""
        done = {} if _done is None else _done
        out = lin(self.const)
        for a, c in self.terms:
            if a in env:
                v = env[a]
            elif isinstance(a, (FloorDiv, Mod)):
                v = done.get(a)
                if v is None:
                    x = a.x.substitute(env, done)
                    v = done[a] = x // a.c if isinstance(a, FloorDiv) else x % a.c
            else:
                v = lin(a)
            out = out + v * c
        return out


def _trunc(k: int, c: int) -> int:
    """k / c rounded toward zero."""
    return -(-k // c) if k < 0 else k // c


def _common_factor(e: Lin, c: int):
    """Write e = a*big + small with a | c, 1 < a < c and 0 <= small < a, if possible.

    Returns (a, big, small) for the largest such a, else None.
    """
    best = None
    for _, coef in e.terms:
        a = math.gcd(c, coef)
        if a <= 1 or a >= c or (best is not None and a <= best[0]):
            continue
        big = {atom: k // a for atom, k in e.terms if k % a == 0}
        small = _make({atom: k for atom, k in e.terms if k % a}, e.const)
        if small.min >= 0 and small.max < a and not small.has_divmod():
            best = (a, _make(big, 0), small)
    return best


def lin(x) -> Lin:
    """Lift an int or an atom to an expression."""
    if isinstance(x, Lin):
        return x
    if isinstance(x, int):
        return Lin((), x)
    if isinstance(x, Atom):
        return Lin(((x, 1),), 0)
    raise TypeError(f"not an index expression: {x!r}")


def _make(coefs: dict[Atom, int], const: int) -> Lin:
    coefs = {a: c for a, c in coefs.items() if c}
    if len(coefs) < 2:  # (nothing to fold or order: most of a view's expressions)
        return Lin(tuple(coefs.items()), const)
    const += _fold_divmod_pairs(coefs)
    terms = tuple(sorted(coefs.items(), key=_order_of_term))
    return Lin(terms, const)


def _order_of_term(term: tuple[Atom, int]):
    return _order(term[0])


def _fold_divmod_pairs(coefs: dict[Atom, int]) -> int:
    """Undo splits that a later merge reverses, until nothing changes:

        (x // c) * c * k + (x % c) * k        ==  x * k
        ((x // a) % b) * a * k + (x % a) * k  ==  (x % (a * b)) * k

    Rewrites `coefs` in place and returns the constant the folded terms add.
    """
    if not any(type(a) is Mod for a in coefs):  # (the usual case: nothing to fold)
        return 0
    const, changed = 0, True
    while changed:
        changed = False
        for a in [a for a in coefs if isinstance(a, Mod)]:
            k = coefs.get(a)
            if not k:
                continue
            d = FloorDiv(a.x, a.c)
            if coefs.get(d) == k * a.c:
                del coefs[a], coefs[d]
                folded = a.x * k
            else:
                outer = next(
                    (
                        m
                        for m in coefs
                        if isinstance(m, Mod) and coefs[m] == k * a.c and m.x == lin(d)
                    ),
                    None,
                )
                if outer is None:
                    continue
                del coefs[a], coefs[outer]
                folded = (a.x % (a.c * outer.c)) * k
            for atom, c in folded.terms:
                coefs[atom] = coefs.get(atom, 0) + c
            const += folded.const
            for atom in [atom for atom, c in coefs.items() if c == 0]:
                del coefs[atom]
            changed = True
            break
    return const


def _order(a: Atom):
    if isinstance(a, Var):
        return (0, a.name)
    return (1, repr(a))


def linear_coeffs(e: Lin) -> dict[Var, int] | None:
    """The coefficient of each loop variable if `e` is affine in them, else None."""
    if e.has_divmod():
        return None
    return {a: c for a, c in e.terms}
