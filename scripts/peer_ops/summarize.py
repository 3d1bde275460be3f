"""Pass rate of a peer op suite run (scripts/peer_ops/run.sh) from pytest's junit report.

Applicable = passed + failed: the tests the shim skips as not applicable, and those the
suite skips itself (its own @skip / slow switches), count in neither.
"""

import sys
import xml.etree.ElementTree as ET


def main(path: str) -> None:
    passed = failed = not_applicable = skipped = 0
    for case in ET.parse(path).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            if "not applicable" in (skip.get("message") or ""):
                not_applicable += 1
            else:
                skipped += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        else:
            passed += 1
    applicable = passed + failed
    rate = 100.0 * passed / applicable if applicable else 0.0
    print(
        f"peer ops: {passed} passed, {failed} failed, {not_applicable} not applicable, "
        f"{skipped} skipped by the suite; pass rate {rate:.1f}% of {applicable} applicable"
    )


if __name__ == "__main__":
    main(sys.argv[1])
