"""The suite's cost per test file, from a pytest JUnit XML report: the table of
docs/development.md ("Where the suite's time goes").

    ./dev.sh test --junitxml=/tmp/suite.xml
    .venv/bin/python .ci/test_times.py /tmp/suite.xml [--top 25]

Prints a Markdown table: per file, the tests run (passed, failed, skipped), and the
worker-seconds spent (setup, call and teardown, summed over the xdist workers), heaviest
first, with the total. The wall time is what pytest's last line says.
"""

import argparse
import collections
import xml.etree.ElementTree as ET


def _file_of(case: ET.Element) -> str:
    classname = case.get("classname", "")
    parts = classname.split(".")
    # "tests.lib.test_scan" or "tests.lib.test_scan.TestClass": up to the test_ module
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return case.get("file") or classname


def table(path: str, top: int) -> str:
    root = ET.parse(path).getroot()
    seconds: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in root.iter("testcase"):
        name = _file_of(case)
        seconds[name] += float(case.get("time", 0))
        if case.find("skipped") is not None:
            counts[name]["skipped"] += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            counts[name]["failed"] += 1
        else:
            counts[name]["passed"] += 1
    rows = sorted(seconds, key=seconds.get, reverse=True)  # type: ignore[arg-type]
    total = sum(seconds.values())
    lines = ["| file | tests | worker-s | share |", "|---|---:|---:|---:|"]
    for name in rows[:top]:
        c = counts[name]
        n = sum(c.values())
        lines.append(f"| `{name}` | {n} | {seconds[name]:.0f} | {seconds[name] / total:.0%} |")
    rest = rows[top:]
    if rest:
        n = sum(sum(counts[r].values()) for r in rest)
        s = sum(seconds[r] for r in rest)
        lines.append(f"| {len(rest)} other files | {n} | {s:.0f} | {s / total:.0%} |")
    n = sum(sum(c.values()) for c in counts.values())
    lines.append(f"| **all {len(rows)} files** | **{n}** | **{total:.0f}** | 100% |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", help="a pytest --junitxml report")
    p.add_argument("--top", type=int, default=25, help="files listed one by one [25]")
    args = p.parse_args()
    print(table(args.report, args.top))


if __name__ == "__main__":
    main()
