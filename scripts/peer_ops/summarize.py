"""Pass rate of a peer op suite run (scripts/peer_ops/run.sh) from pytest's junit report.

Applicable = passed + failed: the tests the shim skips as not applicable, and those the
suite skips itself (its own @skip / slow switches), count in neither.
"""

import sys
import xml.etree.ElementTree as ET


def main(path: str) -> None:
    # one verdict per test function: a failed subtest (its own <testcase>) fails it
    verdict: dict[tuple, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        key = (case.get("classname"), case.get("name"))
        skip = case.find("skipped")
        if skip is not None:
            na = "not applicable" in (skip.get("message") or "")
            v = "not applicable" if na else "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            v = "failed"
        else:
            v = "passed"
        if verdict.get(key) != "failed":
            verdict[key] = v
    count = {k: sum(v == k for v in verdict.values()) for k in ("passed", "failed")}
    not_applicable = sum(v == "not applicable" for v in verdict.values())
    skipped = sum(v == "skipped" for v in verdict.values())
    applicable = count["passed"] + count["failed"]
    rate = 100.0 * count["passed"] / applicable if applicable else 0.0
    print(
        f"peer ops: {count['passed']} passed, {count['failed']} failed, {not_applicable} not "
        f"applicable, {skipped} skipped by the suite; pass rate {rate:.1f}% of {applicable} "
        "applicable"
    )
    for key, v in sorted(verdict.items()):
        if v == "failed":
            print("  failed:", key[1])


if __name__ == "__main__":
    main(sys.argv[1])
