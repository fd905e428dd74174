"""Loading a handler: the current folder is searched first, as ``python -m tierpool`` searches it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tierpool import App
from tierpool.runtime.handler_loading import HandlerNotFound, import_from, is_async, load_handler


def test_import_from_puts_the_folder_first_once() -> None:
    search = ["/venv/bin", "/venv/lib/site-packages"]
    import_from("/work/app", search)
    import_from("/work/app", search)
    assert search == ["/work/app", "/venv/bin", "/venv/lib/site-packages"]


def test_a_handler_module_in_the_folder_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "folder_handlers_probe.py").write_text("def run(task):\n    return 1\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(HandlerNotFound, match="cannot import module 'folder_handlers_probe'"):
        load_handler("folder_handlers_probe:run")
    import_from(str(tmp_path), sys.path)
    assert load_handler("folder_handlers_probe:run").__module__ == "folder_handlers_probe"


def test_a_module_that_fails_at_import_is_named_with_the_error_and_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kaput_handlers_probe.py").write_text("x = 1\nraise RuntimeError('kaput')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(HandlerNotFound) as raised:
        load_handler("kaput_handlers_probe:run")
    where = tmp_path / "kaput_handlers_probe.py"
    assert str(raised.value) == (
        f"handler 'kaput_handlers_probe:run': cannot import module 'kaput_handlers_probe': RuntimeError: kaput "
        f"(at {where}:2)"
    )


APP_MODULES = [
    ("apps_probe_empty", "import tierpool\napp = tierpool.App()\n", "the app has no tasks"),
    (
        "apps_probe_unresolved",
        "import tierpool\napp = tierpool.App()\n@app.task()\nasync def t(task, inp: 'Missing') -> int:\n    return 1\n",
        "a task's annotations do not resolve: NameError",
    ),
]


@pytest.mark.parametrize(("module", "source", "error"), APP_MODULES)
def test_an_app_a_worker_cannot_serve_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, error: str
) -> None:
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(HandlerNotFound, match=error):
        load_handler(f"{module}:app")


def test_an_app_loads_as_the_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "import tierpool\napp = tierpool.App()\n@app.task()\nasync def t(task, inp: int) -> int:\n    return inp\n"
    (tmp_path / "apps_probe_good.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load_handler("apps_probe_good:app")
    assert isinstance(loaded, App) and list(loaded.tasks) == ["t"] and is_async(loaded)
