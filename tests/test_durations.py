"""The recorded seconds per test file and the heaviest-first collection order (tests/durations.py)."""
from __future__ import annotations

import durations


def test_from_junit_sums_each_files_tests(tmp_path):
    xml = tmp_path / "suite.xml"
    xml.write_text('<testsuites><testsuite name="pytest">'
                   '<testcase classname="tests.test_a" name="x" time="1.25"/>'
                   '<testcase classname="tests.test_b" name="y" time="3.5"/>'
                   '<testcase classname="tests.test_a" name="z" time="0.5"/>'
                   '<testcase classname="tests.test_c" name="w"/>'
                   '</testsuite></testsuites>')
    got = durations.from_junit(xml)
    assert got == {"tests/test_b.py": 3.5, "tests/test_a.py": 1.8, "tests/test_c.py": 0.0}
    assert list(got) == ["tests/test_b.py", "tests/test_a.py", "tests/test_c.py"]   # heaviest first


def test_a_missing_or_broken_table_gives_no_order(tmp_path):
    assert durations.file_seconds(tmp_path / "absent.json") == {}
    for text in ("not json", "[]", '{"seconds": [1, 2]}', '{"seconds": {"tests/test_a.py": "many"}}'):
        (tmp_path / "t.json").write_text(text)
        assert durations.file_seconds(tmp_path / "t.json") == {}, text
    (tmp_path / "t.json").write_text('{"seconds": {"tests/test_a.py": 2}}')
    assert durations.file_seconds(tmp_path / "t.json") == {"tests/test_a.py": 2.0}


def test_the_session_collects_the_heaviest_files_first_each_file_whole(request):
    seconds = durations.file_seconds()
    assert seconds["tests/test_parity_loops.py"] > 100          # the committed table is read
    files = [item.nodeid.split("::")[0] for item in request.session.items]
    runs = [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]
    assert len(runs) == len(set(runs))                           # each file's tests together
    weights = [seconds.get(f, 1.0) for f in runs]
    assert weights == sorted(weights, reverse=True)
