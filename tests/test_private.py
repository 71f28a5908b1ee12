"""Private lock files and segments: another local user can neither plant a symlink where a
run creates its lock nor open it (a read-only flock froze every worker); leftovers of dead
runs are swept at the next start."""
import os
import stat
import subprocess
import sys
import uuid

import numpy as np
import pytest

from workbench.comm.shm import ShmServer, attach, create_segment, create_server_segment, unlink_segment
from workbench.util import private as P


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A private directory of this test's own: XDG_RUNTIME_DIR pointed at tmp_path."""
    os.chmod(tmp_path, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / "workbench"


def test_the_private_dir_is_0700_and_the_lock_0600(runtime):
    path = P.create_lock("r" + uuid.uuid4().hex[:8])
    assert os.path.dirname(path) == str(runtime)
    assert stat.S_IMODE(os.lstat(runtime).st_mode) == 0o700 and os.lstat(runtime).st_uid == os.getuid()
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert int(open(path).read()) == os.getpid()


def test_a_planted_symlink_at_the_lock_is_refused_and_its_target_untouched(runtime, tmp_path):
    run_id = "r" + uuid.uuid4().hex[:8]
    P.private_dir()
    target = tmp_path / "victim.txt"
    os.symlink(target, runtime / f"{run_id}.{os.getpid()}.lock")
    with pytest.raises(FileExistsError):
        P.create_lock(run_id)
    assert not target.exists()                   # nothing created through the link
    with pytest.raises(OSError):                 # and a worker never opens a lock through one
        P.open_private(runtime / f"{run_id}.{os.getpid()}.lock")


def test_a_planted_symlink_as_the_private_dir_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(P.tempfile, "gettempdir", lambda: str(tmp_path))
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / f"workbench-{os.getuid()}")
    with pytest.raises(P.PrivateDirError, match="got a symlink"):
        P.create_lock("r" + uuid.uuid4().hex[:8])
    assert list(elsewhere.iterdir()) == []


def test_an_open_private_dir_of_ours_is_closed_to_others(runtime):
    runtime.mkdir(mode=0o777)
    os.chmod(runtime, 0o777)
    P.private_dir()
    assert stat.S_IMODE(os.lstat(runtime).st_mode) == 0o700


OTHER_PYTHON = "/usr/bin/python3"   # one a second user can run (the venv may sit under /root)


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(OTHER_PYTHON, os.X_OK),
                    reason="needs root and a system python3 to act as a second local user (uid 65534)")
def test_another_user_cannot_open_the_lock_to_flock_it(monkeypatch, tmp_path):
    # The attack: open the lock read-only and flock it; every worker of an async run froze.
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)     # the default place, under the shared /tmp
    probe = ("import fcntl, sys\ntry:\n    f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "    print('locked')\nexcept PermissionError:\n    print('refused')\n")

    def as_nobody(path):
        return subprocess.run([OTHER_PYTHON, "-c", probe, str(path)], capture_output=True, text=True, user=65534,
                              group=65534, extra_groups=[], timeout=60, cwd="/").stdout.strip()
    path = P.create_lock("r" + uuid.uuid4().hex[:8])
    try:
        assert as_nobody(path) == "refused"
    finally:
        os.unlink(path)
    old_style = f"/tmp/workbench-{uuid.uuid4().hex[:12]}.lock"   # the old lock: /tmp, mode 0644
    open(old_style, "a+").close()
    os.chmod(old_style, 0o644)
    try:
        assert as_nobody(old_style) == "locked"                  # the probe does detect the attack
    finally:
        os.unlink(old_style)


def test_segments_are_0600_and_a_foreign_one_is_refused(runtime):
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", 64)
    try:
        assert stat.S_IMODE(os.stat(f"/dev/shm/{name}").st_mode) == 0o600
        assert (runtime / f"seg.{name}").exists()          # recorded with its creator's pid
        if os.geteuid() == 0:     # as if another user had made it under our name
            import workbench.comm.shm as shm
            os.chown(f"/dev/shm/{name}", 65534, 65534)
            mine = shm._OWNED.pop(name)
            try:
                with pytest.raises(P.PrivateDirError, match="uid 65534"):
                    attach(name)
            finally:
                shm._OWNED[name] = mine
    finally:
        unlink_segment(name)
    assert not (runtime / f"seg.{name}").exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_runs_segment_and_lock_are_swept_a_live_ones_kept(runtime):
    from multiprocessing import shared_memory
    dead, ours = _dead_pid(), os.getpid()
    leaked = f"wbt{uuid.uuid4().hex[:10]}"
    seg = shared_memory.SharedMemory(name=leaked, create=True, size=64)   # as a run killed with -9 left it
    seg.close()
    from multiprocessing import resource_tracker
    resource_tracker.unregister("/" + leaked, "shared_memory")
    P.create_private(f"seg.{leaked}", str(dead))
    P.create_private(f"rdead.{dead}.lock", str(dead))
    live = P.create_lock("rlive" + uuid.uuid4().hex[:6])
    removed = P.sweep_stale()
    assert leaked in removed and f"rdead.{dead}.lock" in removed
    assert not os.path.exists(f"/dev/shm/{leaked}")
    assert not (runtime / f"seg.{leaked}").exists() and not (runtime / f"rdead.{dead}.lock").exists()
    assert os.path.exists(live) and int(open(live).read()) == ours


def test_the_shared_memory_server_works_through_the_private_lock(runtime):
    params = np.zeros(4, np.float32)
    name = create_server_segment(f"wbt{uuid.uuid4().hex[:10]}", params, momentum=False)
    lock = P.create_lock("r" + uuid.uuid4().hex[:8])
    try:
        server = ShmServer(name, lock, 4, 2)
        version, x, _ = server.push(np.ones(4, np.float32), 0.5, 0)
        np.testing.assert_array_equal(server.pull()[1], -0.5 * np.ones(4))
        server.close()
    finally:
        unlink_segment(name)
