#!/usr/bin/env python3
"""Prints `N passed, N failed` for the XCTest results in an xUnit file (`swift test --xunit-output FILE`).

A test case with a <failure> or <error> element failed; one with <skipped> is counted apart (on a line before);
every other one passed. The summary is the last line, so that it is the last line of a CI run. Exit status: 0 when
nothing failed, 1 when something did, 2 when the file is missing or is not an xUnit report.
"""
import sys
import xml.etree.ElementTree as ET


def main(argv):
    if len(argv) != 2:
        print("usage: xunit-summary.py XUNIT_FILE", file=sys.stderr)
        return 2
    try:
        root = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"error: no test results in {argv[1]}: {error}", file=sys.stderr)
        print("0 passed, 0 failed")
        return 2
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if skipped:
        print(f"{skipped} skipped")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
