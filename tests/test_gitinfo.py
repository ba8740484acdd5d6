"""esverify.gitinfo: the git facts every report records (commit, dirty flag, top level)."""
import subprocess

from esverify import gitinfo


def sh(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_outside_a_checkout_every_answer_is_none(tmp_path):
    assert gitinfo.toplevel(tmp_path) is None
    assert gitinfo.commit_and_dirty(tmp_path) == (None, None)
    assert gitinfo.git(tmp_path, "rev-parse", "HEAD") is None


def test_commit_dirty_flag_and_top_level(tmp_path):
    sh(tmp_path, "init", "-q")
    assert gitinfo.commit_and_dirty(tmp_path) == (None, False)   # no commit yet, nothing changed
    (tmp_path / "a.txt").write_text("one\n")
    sh(tmp_path, "add", "a.txt")
    sh(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    sub = tmp_path / "sub"
    sub.mkdir()
    assert gitinfo.toplevel(sub).resolve() == tmp_path.resolve()
    assert gitinfo.commit_and_dirty(tmp_path) == (head, False)
    (tmp_path / "a.txt").write_text("two\n")
    assert gitinfo.commit_and_dirty(sub) == (head, True)
    assert gitinfo.git(tmp_path, "show", "HEAD:a.txt", binary=True) == b"one\n"
