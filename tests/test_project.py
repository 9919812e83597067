import pytest

from memory_server.project import DEFAULT_MARKERS, ProjectNotFoundError, find_project


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
