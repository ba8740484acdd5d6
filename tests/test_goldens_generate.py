"""`goldens generate`: per-id rules, --bump, unimportable areas, the wheel-install refusal.

A toy area (test_goldens_support.ToyArea) stands in for an implementation
whose vectors and version constant a test can change between runs; the
"checkout" is a temporary folder with goldens/ and CHANGELOG.md.
"""
import pytest

from esverify import paths
from esverify.goldens import areas as area_mod
from test_goldens_support import ToyArea, load, register_area, register_toy, run


@pytest.fixture
def toy(monkeypatch):
    t = ToyArea()
    register_toy(monkeypatch, t)
    return t


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "goldens").mkdir()
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n\n## toy v1\n\nfirst.\n")
    return tmp_path


def generate(checkout, *extra):
    return run("goldens", "generate", "--area", "toy", "--goldens-dir", str(checkout / "goldens"), *extra)


def test_first_generation_then_byte_identical(toy, checkout):
    first = generate(checkout)
    assert first.exit_code == 0, first.output
    path = checkout / "goldens" / "toy.json"
    before = path.read_bytes()
    assert load(path)["contract"] == {"name": "toy", "version": 1}
    second = generate(checkout)
    assert second.exit_code == 0 and "bytes unchanged" in second.output
    assert path.read_bytes() == before


def test_new_ids_and_comments_are_free(toy, checkout):
    generate(checkout)
    toy.values["three"] = [9, 9]
    toy.comments["one"] = "reworded"
    result = generate(checkout)
    assert result.exit_code == 0, result.output
    assert "1 new, 0 changed, 0 removed" in result.output
    assert [v["id"] for v in load(checkout / "goldens" / "toy.json")["vectors"]] == ["one", "two", "three"]


@pytest.mark.parametrize("edit", ["change", "remove"])
def test_changed_or_removed_ids_are_refused_without_bump(toy, checkout, edit):
    generate(checkout)
    path = checkout / "goldens" / "toy.json"
    before = path.read_bytes()
    if edit == "change":
        toy.values["one"] = [1, 2, 4]
    else:
        del toy.values["two"]
    result = generate(checkout)
    assert result.exit_code == 1
    assert "refused" in result.output and "--bump" in result.output
    assert path.read_bytes() == before          # nothing written


def test_bump_needs_an_incremented_version(toy, checkout):
    generate(checkout)
    toy.values["one"] = [7]
    result = generate(checkout, "--bump")
    assert result.exit_code == 1
    assert "still 1" in result.output


def test_bump_needs_a_changelog_heading(toy, checkout):
    generate(checkout)
    toy.values["one"] = [7]
    toy.version = 2
    result = generate(checkout, "--bump")
    assert result.exit_code == 1
    assert "'## toy v2'" in result.output
    with open(checkout / "CHANGELOG.md", "a") as fh:
        fh.write("\n## toy v2\n\nchanged vector one.\n")
    text = (checkout / "CHANGELOG.md").read_text()
    ok = generate(checkout, "--bump")
    assert ok.exit_code == 0, ok.output
    doc = load(checkout / "goldens" / "toy.json")
    assert doc["contract"]["version"] == 2
    assert doc["vectors"][0]["expected"]["values"]["values"] == ["0x00000007"]
    assert (checkout / "CHANGELOG.md").read_text() == text       # --bump edits nothing but the golden


def test_changelog_heading_must_match_exactly(toy, checkout):
    generate(checkout)
    toy.values["one"] = [7]
    toy.version = 2
    (checkout / "CHANGELOG.md").write_text("## toy v1\n## toy v21\n### toy v2\n## toyx v2\n")
    assert generate(checkout, "--bump").exit_code == 1


def test_version_never_goes_backwards(toy, checkout):
    toy.version = 3
    generate(checkout)
    toy.version = 2
    result = generate(checkout)
    assert result.exit_code == 1
    assert "backwards" in result.output


def test_out_writes_elsewhere_and_compares_with_the_goldens_dir(toy, checkout, tmp_path):
    generate(checkout)
    toy.values["one"] = [5]
    out = tmp_path / "elsewhere"
    assert generate(checkout, "--out", str(out)).exit_code == 1      # still compared with the baseline
    toy.values["one"] = [1, 2, 3]
    toy.values["four"] = [4]
    assert generate(checkout, "--out", str(out)).exit_code == 0
    assert (out / "toy.json").is_file()
    assert "four" not in (checkout / "goldens" / "toy.json").read_text()


def test_unreadable_baseline_exits_2(toy, checkout):
    (checkout / "goldens" / "toy.json").write_text("not json")
    result = generate(checkout)
    assert result.exit_code == 2
    assert "not readable JSON" in result.output


def test_area_whose_module_does_not_import(monkeypatch, checkout):
    register_area(monkeypatch, "broken", "esverify.goldens._no_such_area_module:AREA")
    named = run("goldens", "generate", "--area", "broken", "--goldens-dir", str(checkout / "goldens"))
    assert named.exit_code == 2
    assert "does not import" in named.output
    monkeypatch.setattr(area_mod, "area_names", lambda: ["broken"])
    implicit = run("goldens", "generate", "--goldens-dir", str(checkout / "goldens"))
    assert implicit.exit_code == 0
    assert "broken: skipped" in implicit.output and "does not import" in implicit.output


def test_unknown_area_exits_2(checkout):
    result = run("goldens", "generate", "--area", "nope", "--goldens-dir", str(checkout / "goldens"))
    assert result.exit_code == 2
    assert "unknown golden area 'nope'" in result.output


def test_wheel_install_without_out_exits_2(toy, monkeypatch):
    monkeypatch.setattr(paths, "checkout_root", lambda: None)
    result = run("goldens", "generate", "--area", "toy")
    assert result.exit_code == 2
    assert "installed package" in result.output and "--out" in result.output


def test_check_of_an_area_module_that_fails_while_its_goldens_exist(monkeypatch, checkout, toy):
    generate(checkout)
    (checkout / "goldens" / "broken.json").write_text((checkout / "goldens" / "toy.json").read_text())
    register_area(monkeypatch, "broken", "esverify.goldens._no_such_area_module:AREA")
    result = run("goldens", "check", "--area", "broken", "--goldens-dir", str(checkout / "goldens"))
    assert result.exit_code == 2
    assert "does not import" in result.output


def test_toy_area_goes_through_the_check_too(toy, checkout):
    generate(checkout)
    result = run("goldens", "check", "--area", "toy", "--goldens-dir", str(checkout / "goldens"))
    assert result.exit_code == 0, result.output
    toy.version = 2
    mismatch = run("goldens", "check", "--area", "toy", "--goldens-dir", str(checkout / "goldens"))
    assert mismatch.exit_code == 2
    assert "records toy version 1" in mismatch.output and "is 2" in mismatch.output


def _git(repo, *args):
    import subprocess
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


def test_baseline_is_the_committed_file_so_deleting_it_cannot_slip_a_change_through(toy, checkout):
    """generate compares with the file committed at HEAD, not whatever the work tree holds."""
    assert generate(checkout).exit_code == 0
    _git(checkout, "init", "-q")
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-qm", "goldens")
    path = checkout / "goldens" / "toy.json"
    committed = path.read_bytes()
    toy.values["one"] = [1, 2, 4]
    path.unlink()                                   # delete, then regenerate: still refused
    result = generate(checkout)
    assert result.exit_code == 1 and "1 changed" in result.output and "at HEAD" in result.output
    assert not path.exists()
    path.write_bytes(committed.replace(b"0x00000003", b"0x00000004"))   # hand edit: also refused
    assert generate(checkout).exit_code == 1
    toy.values["one"] = [1, 2, 3]
    toy.values["three"] = [3]                       # new ids stay free
    assert generate(checkout).exit_code == 0
