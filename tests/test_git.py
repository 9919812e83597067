"""git repositories as the server meets them (git.py), and where memory files' locks live (files.lock_path_for),
with real `git`: worktrees, `git status` after writes, several processes on one file."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

from gitrepo import git, new_repository, porcelain

from memory_server.files import LOCKS_FOLDER, legacy_lock_path, lock_path_for
from memory_server.git import find_checkout
from memory_server.graph import Entity
from memory_server.project import Project
from memory_server.store import GraphStore

MEMORY = ".ai-memory.jsonl"


def add_worktree(repo: Path, folder: Path, branch: str) -> Path:
    git(repo, "worktree", "add", "-q", "-b", branch, str(folder))
    return folder.resolve()


# ---- where the repository is -------------------------------------------------------------------------------------


def test_a_checkout_and_its_linked_worktrees_share_one_main_checkout(tmp_path):
    repo = new_repository(tmp_path / "repo")
    linked = add_worktree(repo, tmp_path / "feature", "feature")
    (repo / "src" / "deep").mkdir(parents=True)
    main, other = find_checkout(repo / "src" / "deep"), find_checkout(linked)
    assert (main.top, main.git_dir, main.common_dir) == (repo, repo / ".git", repo / ".git")
    assert other.top == linked and other.git_dir.parent == repo / ".git" / "worktrees"
    assert other.common_dir == repo / ".git"
    assert main.main_checkout == other.main_checkout == repo
    assert Project(linked, ".git").repo_root == Project(repo, ".git").repo_root == repo


def test_a_bare_repository_stands_in_for_its_missing_main_checkout(tmp_path):
    repo = new_repository(tmp_path / "seed")
    bare = tmp_path / "shop.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    linked = add_worktree(bare, tmp_path / "work", "work")
    assert find_checkout(linked).main_checkout == bare.resolve()


def test_a_separate_git_folder_is_its_own_main_checkout(tmp_path):
    top = tmp_path / "app"
    top.mkdir()
    git(top, "init", "-q", "--separate-git-dir", str(tmp_path / "elsewhere.git"))
    checkout = find_checkout(top)
    assert checkout.git_dir == checkout.common_dir == (tmp_path / "elsewhere.git").resolve()
    assert checkout.main_checkout == top.resolve()


def test_odd_git_entries_are_no_repository(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".git").write_text("not a gitdir line\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".git").write_text("gitdir: ../missing\n")
    assert find_checkout(tmp_path / "a") is None
    assert find_checkout(tmp_path / "b") is None
    assert find_checkout(tmp_path / "c") is None


def test_a_project_in_a_home_dotfile_repository_is_its_own_repo_root(tmp_path):
    home = Path.home()  # the test's own (conftest.py)
    git(home, "init", "-q")
    project = home / "code" / "shop"
    (project / "package.json").parent.mkdir(parents=True)
    (project / "package.json").write_text("{}")
    assert Project(project.resolve(), "package.json").repo_root == project.resolve()


# ---- where locks live ------------------------------------------------------------------------------------------


def test_a_lock_in_a_work_tree_lives_in_the_common_git_folder(tmp_path):
    repo = new_repository(tmp_path / "repo")
    linked = add_worktree(repo, tmp_path / "feature", "feature")
    for folder in (repo, linked, repo / "docs" / "notes"):
        lock = lock_path_for(folder / MEMORY)
        assert lock.parent == repo / ".git" / LOCKS_FOLDER and lock.suffix == ".lock"
    assert lock_path_for(repo / MEMORY) != lock_path_for(linked / MEMORY)  # two files, two locks
    assert lock_path_for(repo / MEMORY) != lock_path_for(repo / "other.jsonl")
    outside = tmp_path / "plain" / MEMORY
    assert lock_path_for(outside) == legacy_lock_path(outside) == tmp_path / "plain" / f"{MEMORY}.lock"


def test_every_spelling_of_a_folder_gets_the_same_lock(tmp_path):
    repo = new_repository(tmp_path / "repo")
    (tmp_path / "link").symlink_to(repo, target_is_directory=True)
    assert lock_path_for(tmp_path / "link" / MEMORY) == lock_path_for(repo / MEMORY)
    assert lock_path_for(repo / ".AI-Memory.JSONL") == lock_path_for(repo / MEMORY)  # macOS, Windows: one file


def test_the_lock_path_does_not_depend_on_the_environment(tmp_path):
    repo = new_repository(tmp_path / "repo")
    code = "import sys; from pathlib import Path; from memory_server.files import lock_path_for; "
    code += "print(lock_path_for(Path(sys.argv[1])))"
    answers = set()
    for number, variables in enumerate([{}, {"XDG_DATA_HOME": "/x"}, {"HOME": str(tmp_path), "GIT_DIR": "/nope"}]):
        env = {**os.environ, **variables, "TMPDIR": str(tmp_path / f"t{number}")}
        done = subprocess.run([sys.executable, "-c", code, str(repo / MEMORY)], env=env, capture_output=True, text=True)
        answers.add(done.stdout.strip())
    assert answers == {str(lock_path_for(repo / MEMORY))}


def test_a_git_folder_that_cannot_hold_locks_keeps_the_lock_beside_the_file(tmp_path):
    repo = new_repository(tmp_path / "repo")
    (repo / ".git" / LOCKS_FOLDER).write_text("")  # a file where the folder would go (as root, chmod cannot stop us)
    assert lock_path_for(repo / MEMORY) == legacy_lock_path(repo / MEMORY)
    GraphStore(repo / MEMORY).mutate(lambda graph: graph.create_entities([Entity("Ann", "person", [])]))
    assert sorted(porcelain(repo)) == [f"?? {MEMORY}", f"?? {MEMORY}.lock"]


def test_git_init_around_a_memory_file_moves_the_lock_and_clears_the_old_one(tmp_path):
    folder = tmp_path / "later-a-repo"
    store = GraphStore(folder / MEMORY)
    store.mutate(lambda graph: graph.create_entities([Entity("Ann", "person", [])]))
    assert legacy_lock_path(folder / MEMORY).exists()  # no repository yet: the lock is beside the file
    new_repository(folder)
    store.mutate(lambda graph: graph.create_entities([Entity("Bo", "person", [])]))
    assert lock_path_for(folder / MEMORY).parent == folder.resolve() / ".git" / LOCKS_FOLDER
    GraphStore(folder / MEMORY).mutate(lambda graph: graph.create_entities([Entity("Cy", "person", [])]))
    assert porcelain(folder) == [f"?? {MEMORY}"]  # the old lock was cleared by the first store to hold the new one


# ---- git status after writes, several processes --------------------------------------------------------------------


def _writer(path: str, tag: str, count: int, env: dict[str, str]) -> None:
    os.environ.update(env)  # each process with its own idea of the user's folders
    store = GraphStore(Path(path), lock_timeout=60)
    for number in range(count):
        store.mutate(lambda graph, n=number: graph.add_observations([("Shared", [f"{tag} {n}"])]))


def test_processes_with_different_environments_exclude_each_other_in_a_repository(tmp_path):
    repo = new_repository(tmp_path / "repo")
    linked = add_worktree(repo, tmp_path / "feature", "feature")
    memory = repo / MEMORY
    GraphStore(memory).mutate(lambda graph: graph.create_entities([Entity("Shared", "note", [])]))
    spawn = multiprocessing.get_context("spawn")
    workers = [
        spawn.Process(target=_writer, args=(str(path), f"w{i}", 25, {"XDG_DATA_HOME": str(tmp_path / f"x{i}")}))
        for i, path in enumerate([memory, memory, tmp_path / "feature" / ".." / "repo" / MEMORY])
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    store = GraphStore(memory)
    with store.reading() as graph:
        observations = graph.entities["Shared"].observations
    assert sorted(observations) == sorted(f"w{i} {n}" for i in range(3) for n in range(25))
    assert porcelain(repo) == [f"?? {MEMORY}"] and porcelain(linked) == []
    assert list((repo / ".git" / LOCKS_FOLDER).iterdir()) == [lock_path_for(memory)]
