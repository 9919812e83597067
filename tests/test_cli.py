import subprocess
import sys
from pathlib import Path

import pytest

from memory_server import cli


def test_every_option_has_an_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORY_FILE_PATH", "~/m.jsonl")
    monkeypatch.setenv("MEMORY_CONTEXTS_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("MEMORY_DEFAULT_CONTEXT", "work")
    monkeypatch.setenv("MEMORY_PROJECT_DIR", str(tmp_path))
    monkeypatch.setenv("MEMORY_READ_ONLY", "1")
    monkeypatch.setenv("MEMORY_NO_CONTEXT_ADMIN", "true")
    monkeypatch.setenv("MEMORY_LOCK_TIMEOUT", "2.5")
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "none")
    monkeypatch.setenv("MEMORY_PROJECT_BOOST", "0.3")
    monkeypatch.setenv("MEMORY_LOG_LEVEL", "WARNING")
    options = cli.parse_options([])
    assert options.memory_path == Path.home() / "m.jsonl"
    assert options.contexts_directory == tmp_path / "cfg"
    assert options.default_context == "work"
    assert options.project_dir == tmp_path
    assert options.read_only and options.no_context_admin
    assert options.lock_timeout == 2.5
    assert options.embedding_model == "none"
    assert options.project_boost == 0.3
    assert options.log_level == "warning"
    assert cli.parse_options(["--lock-timeout", "9", "--default-context", "home"]).lock_timeout == 9


def test_defaults_follow_the_xdg_folders(user_folders):
    options = cli.parse_options([])
    assert options.memory_path is None
    assert options.contexts_directory == Path(user_folders["XDG_CONFIG_HOME"]) / "mcp-memory-contexts"
    assert not options.read_only and options.lock_timeout == 10


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_lock_timeout_is_refused_with_a_reason(value, capsys):
    with pytest.raises(SystemExit):
        cli.parse_options(["--lock-timeout", value])
    assert "--lock-timeout" in capsys.readouterr().err


def test_legacy_memory_json_is_renamed_once(user_folders, caplog):
    folder = Path(user_folders["XDG_DATA_HOME"]) / "mcp-memory-contexts"
    folder.mkdir(parents=True)
    (folder / "memory.json").write_text('{"type":"entity","name":"a","entityType":"t","observations":[]}\n')
    path = cli._standard_memory_path()
    cli._migrate_legacy_file(path)
    assert path == folder / "memory.jsonl" and path.exists() and not (folder / "memory.json").exists()
    assert "Renamed the legacy memory file" in caplog.text
    (folder / "memory.json").write_text("newer legacy file")
    cli._migrate_legacy_file(path)
    assert (folder / "memory.json").exists()  # memory.jsonl exists: nothing is overwritten


def test_help_fits_one_screen_and_names_every_variable():
    done = subprocess.run([sys.executable, "-m", "memory_server", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) <= 60
    for variable in (
        "MEMORY_FILE_PATH",
        "MEMORY_CONTEXTS_DIR",
        "MEMORY_DEFAULT_CONTEXT",
        "MEMORY_PROJECT_DIR",
        "MEMORY_READ_ONLY",
        "MEMORY_NO_CONTEXT_ADMIN",
        "MEMORY_LOCK_TIMEOUT",
        "MEMORY_EMBEDDING_MODEL",
    ):
        assert variable in done.stdout


def test_a_bad_environment_value_is_reported_like_a_bad_option(monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_LOCK_TIMEOUT", "forever")
    with pytest.raises(SystemExit):
        cli.parse_options([])
    assert "'forever' is not a number of seconds" in capsys.readouterr().err


def test_no_command_or_serve_starts_the_server_and_commands_parse_their_own_options():
    assert cli.parse_options([]).command is None
    assert cli.parse_options(["serve"]).command == "serve"
    options = cli.parse_options(["search", "rent", "--context", "*", "--mode", "keyword", "--limit", "3", "--json"])
    assert (options.command, options.query, options.context, options.mode, options.limit, options.json) == (
        "search",
        "rent",
        "*",
        "keyword",
        3,
        True,
    )
    options = cli.parse_options(["import", "m.json", "--from", "aim", "--dry-run"])
    assert (options.file, options.source, options.dry_run) == (Path("m.json"), "aim", True)


def test_shared_options_hold_before_and_after_the_command(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORY_LOCK_TIMEOUT", "4")
    before = cli.parse_options(["--memory-path", "a.jsonl", "--read-only", "stats"])
    assert before.memory_path == Path("a.jsonl") and before.read_only and before.lock_timeout == 4
    after = cli.parse_options(["stats", "--memory-path", "b.jsonl", "--lock-timeout", "2"])
    assert after.memory_path == Path("b.jsonl") and after.lock_timeout == 2 and not after.read_only
    both = cli.parse_options(["--memory-path", "a.jsonl", "show", "Ann", "--memory-path", "c.jsonl"])
    assert both.memory_path == Path("c.jsonl")  # the last one given wins, as with any option


def test_commands_log_warnings_only_unless_asked(monkeypatch):
    assert cli.parse_options(["stats"]).log_level is None  # warning for commands, info for the server
    monkeypatch.setenv("MEMORY_LOG_LEVEL", "debug")
    assert cli.parse_options(["stats"]).log_level == "debug"


def test_every_command_has_a_help_page():
    for command in ("serve", "contexts", "search", "show", "stats", "export", "import", "check", "view"):
        done = subprocess.run(
            [sys.executable, "-m", "memory_server", command, "--help"], capture_output=True, text=True
        )
        assert done.returncode == 0 and done.stdout.startswith(f"usage: mcp-memory-contexts {command}")


def test_the_git_commands_are_the_ones_merge_installs():
    from memory_server import merge

    assert cli.GIT_COMMANDS == (merge.MERGE_COMMAND, merge.INSTALL_COMMAND)
    options = cli.parse_options(["merge-driver", "base", "ours", "theirs"])
    assert (options.command, options.base, options.ours, options.theirs) == (
        "merge-driver",
        Path("base"),
        Path("ours"),
        Path("theirs"),
    )


def test_variables_in_paths_from_a_client_configuration_are_filled_in(monkeypatch, tmp_path, capsys):
    """Claude Desktop and Cursor pass `env` values as written: `$HOME/memory.jsonl` made a folder named `$HOME` in
    the client's current folder and the user's memory looked gone. A variable that is not set is an error."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WORK", str(tmp_path / "work"))
    monkeypatch.setenv("MEMORY_FILE_PATH", "$HOME/memory.jsonl")
    monkeypatch.setenv("MEMORY_CONTEXTS_DIR", "${HOME}/cfg")
    monkeypatch.setenv("MEMORY_PROJECT_DIR", "$WORK/shop")
    options = cli.parse_options([])
    assert options.memory_path == tmp_path / "memory.jsonl"
    assert options.contexts_directory == tmp_path / "cfg"
    assert options.project_dir == tmp_path / "work" / "shop"
    monkeypatch.delenv("WORK")
    with pytest.raises(SystemExit) as exit_:
        cli.parse_options([])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "'$WORK/shop' uses the environment variable WORK, which is not set" in error and "--project-dir" in error
