"""Path templates (templates.py): variables anywhere, and where a filled path may lead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gitrepo import git, new_repository

from memory_server.project import Project
from memory_server.templates import PathTemplateError, check_template, fill, is_template


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    names = {"config": tmp_path / "config", "data": tmp_path / "data", "memories": Path.home() / ".ai-memory"}
    for folder in names.values():
        folder.mkdir(parents=True, exist_ok=True)
    return names


def project_in(tmp_path: Path, *parts: str) -> Project:
    root = tmp_path.joinpath(*parts)
    root.mkdir(parents=True, exist_ok=True)
    return Project(root.resolve(), ".git")


def filled(template: str, project: Project, folders: dict[str, Path]) -> Path:
    return fill(template, project, list(folders.values()), folders["config"]).path


def test_every_variable_works_anywhere_in_a_path(tmp_path, folders):
    shop = project_in(tmp_path, "code", "shop")
    data = folders["data"]
    assert filled(f"{data}/projects/{{projectName}}.jsonl", shop, folders) == data / "projects" / "shop.jsonl"
    assert filled("~/.ai-memory/{projectId}/m.jsonl", shop, folders) == folders["memories"] / shop.id / "m.jsonl"
    assert filled(f"{data}/by-path{{projectDir}}/m.jsonl", shop, folders) == Path(f"{data}/by-path{shop.root}/m.jsonl")
    assert filled("{projectDir}/.ai/{projectName}-{projectId}.jsonl", shop, folders) == (
        shop.root / ".ai" / f"shop-{shop.id}.jsonl"
    )
    assert filled("projects/{projectName}.jsonl", shop, folders) == folders["config"] / "projects" / "shop.jsonl"
    assert all(is_template(t) for t in ("a/{projectName}.jsonl", "{repoRoot}/m.jsonl", "x/{projectId}.jsonl"))
    assert not is_template("~/.ai-memory/work.jsonl")


def test_two_projects_with_one_name_get_two_files(tmp_path, folders):
    one, two = project_in(tmp_path, "a", "api"), project_in(tmp_path, "b", "api")
    template = "~/.ai-memory/projects/{projectId}.jsonl"
    assert filled(template, one, folders) != filled(template, two, folders)


def test_a_folder_named_like_a_variable_is_not_filled_twice(tmp_path, folders):
    odd = project_in(tmp_path, "{projectId}")
    assert filled("{projectDir}/{projectName}.jsonl", odd, folders) == odd.root / "{projectId}.jsonl"


def test_repo_root_is_the_main_checkout_for_every_worktree(tmp_path, folders):
    repo = new_repository(tmp_path / "repo")
    git(repo, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "feature"))
    for root in (repo, (tmp_path / "feature").resolve()):
        assert filled("{repoRoot}/.ai-memory.jsonl", Project(root, ".git"), folders) == repo / ".ai-memory.jsonl"
        assert fill("{repoRoot}/.ai-memory.jsonl", Project(root, ".git"), [], tmp_path).in_project


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{projectDir}/../escape.jsonl", "leaves the project folder"),
        ("{repoRoot}/../escape.jsonl", "leaves the repository"),
        ("/tmp/{projectName}.jsonl", "neither inside the project nor in one of your memory folders"),
        ("~/.ai-memory/../{projectName}.jsonl", "neither inside the project nor in one of your memory folders"),
        ("~/elsewhere/{projectId}.jsonl", "neither inside the project nor in one of your memory folders"),
    ],
)
def test_templates_that_lead_elsewhere_are_refused(tmp_path, folders, template, problem):
    shop = project_in(tmp_path, "shop")
    with pytest.raises(PathTemplateError, match=re.escape(problem)):
        fill(template, shop, list(folders.values()), folders["config"])
    with pytest.raises(PathTemplateError, match=re.escape(problem)):
        check_template(template, list(folders.values()), folders["config"])


def test_a_symbolic_link_cannot_lead_out_of_a_memory_folder(tmp_path, folders):
    outside = tmp_path / "outside"
    outside.mkdir()
    (folders["memories"] / "projects").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathTemplateError, match="symbolic link"):
        filled("~/.ai-memory/projects/{projectName}.jsonl", project_in(tmp_path, "shop"), folders)
    (folders["data"] / "shop.jsonl").symlink_to(outside / "shop.jsonl")
    with pytest.raises(PathTemplateError, match="symbolic link"):
        filled(f"{folders['data']}/{{projectName}}.jsonl", project_in(tmp_path, "shop"), folders)


def test_a_link_planted_in_the_project_is_refused_naming_where_it_leads(tmp_path, folders):
    shop = project_in(tmp_path, "shop")
    bashrc = Path.home() / ".bashrc"
    (shop.root / ".ai-memory.jsonl").symlink_to(bashrc)
    (shop.root / "notes").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(PathTemplateError) as refused:
        filled("{projectDir}/.ai-memory.jsonl", shop, folders)
    assert f"a symbolic link takes to {bashrc}, outside the project folder {shop.root}" in str(refused.value)
    assert "Remove the link" in str(refused.value) and "'..'" not in str(refused.value)
    with pytest.raises(PathTemplateError, match=re.escape(f"takes to {tmp_path / 'm.jsonl'}, outside")):
        filled("{projectDir}/notes/m.jsonl", shop, folders)


def test_a_link_may_lead_from_one_memory_folder_into_another(tmp_path, folders):
    (folders["data"] / "projects").mkdir()
    (folders["memories"] / "projects").symlink_to(folders["data"] / "projects", target_is_directory=True)
    template = "~/.ai-memory/projects/{projectName}.jsonl"
    assert filled(template, project_in(tmp_path, "shop"), folders) == folders["memories"] / "projects" / "shop.jsonl"
    check_template(template, list(folders.values()), folders["config"])


def test_a_memory_folder_that_is_itself_a_link_is_the_users_choice(tmp_path, folders):
    synced = tmp_path / "Dropbox" / "memories"
    synced.mkdir(parents=True)
    folders["memories"].rmdir()
    folders["memories"].symlink_to(synced, target_is_directory=True)
    path = filled("~/.ai-memory/{projectName}.jsonl", project_in(tmp_path, "shop"), folders)
    assert path == folders["memories"] / "shop.jsonl"
