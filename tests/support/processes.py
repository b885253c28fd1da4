"""Processes as /proc sees them, for the tests that check none is left behind."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def children(parent: int, running: str = "") -> list[int]:
    """The processes alive whose parent is `parent` and whose command line holds `running` (multiprocessing's
    spawned workers: "spawn_main"; its resource tracker, also a child, runs another)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == parent and fields[0] != "Z" and running in command:
            found.append(int(entry))
    return found
