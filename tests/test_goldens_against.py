"""`goldens check --against GITREF` on a temporary git repository.

A vector changed or removed while the version did not move fails (exit 1)
even when the recomputation agrees with the new file; a file absent at
REF is fine; an unknown REF exits 2.
"""
import os
import subprocess

import pytest

from esverify.goldens import history
from test_goldens_support import copy_goldens, load, run, save, vector

EDITED = "gaussian-poly32-seed-99-first-0-n-2053-chunk-256"


def git(repo, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def repo(tmp_path):
    """A git repo whose first commit (tag `empty`) has no goldens and second (tag `base`) has rng.json."""
    root = tmp_path / "repo"
    (root / "goldens").mkdir(parents=True)
    (root / "README").write_text("x\n")
    git(root, "init", "-q")
    git(root, "add", "README")
    git(root, "commit", "-q", "-m", "empty")
    git(root, "tag", "empty")
    copy_goldens(root / "goldens")
    git(root, "add", "goldens")
    git(root, "commit", "-q", "-m", "goldens")
    git(root, "tag", "base")
    return root


def check(root, *extra):
    return run("goldens", "check", "--area", "rng", "--backend", "numpy",
               "--goldens-dir", str(root / "goldens"), *extra)


def shorten(doc, vid):
    """A consistent edit: drop the last element (inputs and expected agree, recompute passes)."""
    v = vector(doc, vid)
    v["inputs"]["n"] -= 1
    v["expected"]["values"]["values"].pop()


def test_unchanged_goldens_pass_against_base(repo):
    result = check(repo, "--against", "base")
    assert result.exit_code == 0, result.output


def test_changed_vector_at_same_version_fails(repo):
    doc = load(repo / "goldens" / "rng.json")
    shorten(doc, EDITED)
    save(repo / "goldens" / "rng.json", doc)
    assert check(repo).exit_code == 0          # the recomputation alone cannot see it
    result = check(repo, "--against", "base")
    assert result.exit_code == 1
    assert "changed-without-bump" in result.output and EDITED in result.output


def test_removed_vector_at_same_version_fails(repo):
    doc = load(repo / "goldens" / "rng.json")
    doc["vectors"] = [v for v in doc["vectors"] if v["id"] != EDITED]
    save(repo / "goldens" / "rng.json", doc)
    assert check(repo).exit_code == 0
    result = check(repo, "--against", "base")
    assert result.exit_code == 1
    assert "removed-without-bump" in result.output


def test_changed_and_committed_vector_still_fails_against_base(repo):
    """Delete + regenerate + commit cannot slip a change through: REF is the base branch."""
    doc = load(repo / "goldens" / "rng.json")
    shorten(doc, EDITED)
    (repo / "goldens" / "rng.json").unlink()
    git(repo, "commit", "-qam", "delete")
    save(repo / "goldens" / "rng.json", doc)
    git(repo, "add", "goldens")
    git(repo, "commit", "-qm", "regenerate")
    assert check(repo, "--against", "HEAD").exit_code == 0
    assert check(repo, "--against", "base").exit_code == 1


def test_new_vector_is_free(repo):
    doc = load(repo / "goldens" / "rng.json")
    extra = dict(vector(doc, EDITED), id="gaussian-poly32-extra")
    doc["vectors"].append(extra)
    save(repo / "goldens" / "rng.json", doc)
    assert check(repo, "--against", "base").exit_code == 0


def test_file_absent_at_ref_is_fine(repo):
    result = check(repo, "--against", "empty")
    assert result.exit_code == 0, result.output


def test_unknown_ref_exits_2(repo):
    result = check(repo, "--against", "no-such-branch")
    assert result.exit_code == 2
    assert "unknown git ref 'no-such-branch'" in result.output


def test_not_a_git_checkout_exits_2(tmp_path):
    copy_goldens(tmp_path / "g")
    result = run("goldens", "check", "--area", "rng", "--goldens-dir", str(tmp_path / "g"), "--against", "HEAD",
                 env={"GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert result.exit_code == 2
    assert "not inside" in result.output


def test_deleted_file_that_existed_at_ref_fails(repo):
    (repo / "goldens" / "rng.json").unlink()
    result = check(repo, "--against", "base")
    assert result.exit_code == 2                      # rng is required: missing file
    assert "removed-without-bump" in result.output    # and every vector is listed as removed


def test_version_move_allows_changes_and_backwards_moves_fail():
    old = {"contract": {"name": "toy", "version": 1}, "generator": {"tool": "t", "version": "0"},
           "vectors": [{"id": "a", "comment": "c", "inputs": {}, "expected": {"v": {"format": "u32",
                                                                                  "values": ["0x00000001"]}}}]}
    changed = {**old, "vectors": [{**old["vectors"][0], "expected": {"v": {"format": "u32",
                                                                          "values": ["0x00000002"]}}}]}
    assert [r["status"] for r in history.against_rows("toy", old, changed, "base")] == ["changed-without-bump"]
    bumped = {**changed, "contract": {"name": "toy", "version": 2}}
    assert history.against_rows("toy", old, bumped, "base") == []
    assert [r["status"] for r in history.against_rows("toy", bumped, old, "base")] == ["version-backwards"]
    comment_only = {**old, "vectors": [{**old["vectors"][0], "comment": "reworded"}]}
    assert history.against_rows("toy", old, comment_only, "base") == []
