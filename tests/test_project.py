from pathlib import Path

import pytest

from memory_server.project import (
    DEFAULT_MARKERS,
    Project,
    ProjectDirError,
    ProjectNotFoundError,
    file_uri_path,
    find_project,
    folder_from,
)


def test_walks_up_to_the_nearest_marker(tmp_path):
    (tmp_path / "shop" / ".git").mkdir(parents=True)
    deep = tmp_path / "shop" / "src" / "app"
    deep.mkdir(parents=True)
    project = find_project(deep)
    assert project.root == (tmp_path / "shop").resolve()
    assert project.marker == ".git"


def test_nested_project_shadows_the_outer_one(tmp_path):
    (tmp_path / "mono" / ".git").mkdir(parents=True)
    inner = tmp_path / "mono" / "packages" / "web"
    inner.mkdir(parents=True)
    (inner / "package.json").write_text("{}")
    assert find_project(inner / ".").root == inner.resolve()
    assert find_project(inner.parent).root == (tmp_path / "mono").resolve()


def test_a_worktree_git_file_is_a_marker(tmp_path):
    worktree = tmp_path / "feature"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: /elsewhere/.git/worktrees/feature\n")
    assert find_project(worktree).marker == ".git"


def test_symlinked_start_follows_the_real_path(tmp_path):
    (tmp_path / "real" / "proj").mkdir(parents=True)
    (tmp_path / "real" / "proj" / "pyproject.toml").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "real" / "proj")
    project = find_project(tmp_path / "link")
    assert project.root == (tmp_path / "real" / "proj").resolve()
    assert project.marker == "pyproject.toml"


def test_depth_limit(tmp_path):
    (tmp_path / "Cargo.toml").write_text("")
    deep = tmp_path / "1" / "2" / "3"
    deep.mkdir(parents=True)
    assert find_project(deep, max_depth=3).root == tmp_path.resolve()
    with pytest.raises(ProjectNotFoundError):
        find_project(deep, max_depth=2)


def test_no_marker_error_lists_folders_markers_and_ways_out(tmp_path):
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    with pytest.raises(ProjectNotFoundError) as caught:
        find_project(start, [".git"], max_depth=1, context="project", origin="MEMORY_PROJECT_DIR")
    message = str(caught.value)
    assert caught.value.tried == [start.resolve(), (tmp_path / "a").resolve()]
    for fragment in (str(start), "MEMORY_PROJECT_DIR", ".git", "projectDir", "set_active_context"):
        assert fragment in message


def test_default_markers_include_the_memory_file_itself():
    assert ".ai-memory.jsonl" in DEFAULT_MARKERS and ".git" in DEFAULT_MARKERS


def test_the_home_folder_and_the_file_system_root_are_never_projects(tmp_path):
    home = Path.home()  # the test's own (conftest.py), with a stray package.json as `npm install` leaves it
    (home / "package.json").write_text("{}")
    (home / ".git").mkdir()
    inside = home / "notes" / "today"
    inside.mkdir(parents=True)
    for start in (inside, home):
        with pytest.raises(ProjectNotFoundError) as caught:
            find_project(start, max_depth=10)
        assert "your home folder, which is never taken as a project" in str(caught.value)
        assert home.resolve() not in caught.value.tried
    with pytest.raises(ProjectNotFoundError, match="the file-system root, which is never taken as a project"):
        find_project(Path("/"), ["tmp"], origin="the server's current folder")


def test_project_name_and_collision_free_id(tmp_path):
    one, two = Project(tmp_path / "a" / "api", ".git"), Project(tmp_path / "b" / "api", ".git")
    assert one.name == two.name == "api"
    assert one.id != two.id and one.id.startswith("api-") and len(one.id) == len("api-") + 8
    assert one.id == Project(tmp_path / "a" / "api", "package.json").id  # the same folder, the same id


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("file:///home/ann/my%20shop", "/home/ann/my shop"),
        ("FILE:///etc", "/etc"),
        ("file://localhost/srv/x", "/srv/x"),
        ("/plain/path", "/plain/path"),
        ("relative/dir", "relative/dir"),
    ],
)
def test_a_folder_is_a_path_or_a_file_uri(value, expected):
    assert folder_from(value) == Path(expected)


def test_other_uris_are_refused_with_the_fix():
    with pytest.raises(ProjectDirError, match="file:// URI"):
        folder_from("https://github.com/ann/shop")
    assert file_uri_path("https://x/y") is None


@pytest.mark.parametrize("value", ["/tmp/a\x00b", "file:///tmp/a%00b", "shop\nname"])
def test_a_folder_with_a_control_character_is_refused_with_the_fix(value):
    with pytest.raises(ProjectDirError, match="control character"):
        folder_from(value)
