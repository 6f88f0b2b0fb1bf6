"""Work that survives a kill, kept in a folder: one writer at a time (lock_folder), the settings the
work was done with (changed_settings: a rerun with other settings must not mix its work in), and
Journal, an append-only JSON-lines file of one record per key (id, sample), each written whole by
one write() as soon as it exists, so a rerun of the same command does only what is missing.
Python only:
    lock = lock_folder("out")                        # BlockingIOError: another process holds it
    changed = changed_settings("out/run.json", {"sampling": {"temperature": 0.6}})  # [] at first
    samples = Journal("out/samples.jsonl")
    samples.append(dict(id="p1", sample=0, text="..."))  # False: ("p1", 0) was already there
    ("p1", 0) in samples, samples.read(("p1", 0))
"""

import fcntl
import json
import os
import threading


def lock_folder(folder: str):
    """Hold `folder` for this process (an open file with an exclusive lock, released when it is
    closed or the process ends): two writers appending to one journal would write a record twice.
    Raises BlockingIOError if another process holds it."""
    handle = open(os.path.join(folder, ".lock"), "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise
    return handle


def changed_settings(path: str, settings: dict) -> list:
    """The names of the settings that differ from those recorded at `path` (a dict-valued setting
    compared key by key), sorted; nothing recorded there yet: `settings` is written there and none
    differ."""
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump(settings, f, indent=2)
        return []
    with open(path) as f:
        before = json.load(f)
    changed = []
    for name in set(before) | set(settings):
        old = before.get(name)
        new = settings.get(name)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += [key for key in set(old) | set(new) if old.get(key) != new.get(key)]
        elif old != new:
            changed.append(name)
    return sorted(changed)


class Journal:
    """An append-only JSON-lines file holding one record per key (prompt id, sample index), for work
    that must survive a kill. Each record is written whole, by one write(), as soon as it exists.
    Reopening the file drops a last line that has no newline (a kill tore it; that sample is asked
    for again) and indexes the rest, so a rerun knows what is done; append() refuses a key already
    there. Records are read back by offset: only the index stays in memory."""

    def __init__(self, path: str):
        self.path = path
        self.index = {}
        self.lock = threading.Lock()
        self.torn = 0
        size = 0
        if os.path.exists(path):
            with open(path, "rb") as f:
                for n, line in enumerate(f, 1):
                    if not line.endswith(b"\n"):
                        self.torn = len(line)
                        break
                    try:
                        record = json.loads(line)
                        key = (record["id"], record["sample"])
                    except (ValueError, KeyError, TypeError) as e:
                        raise ValueError(
                            f"{path}:{n}: not a record of a journal ({e}); move the file away or "
                            "write to another folder"
                        ) from None
                    if key in self.index:
                        raise ValueError(
                            f"{path}:{n}: record {key} is there twice; this file was not written by "
                            "one journal alone"
                        )
                    self.index[key] = (size, len(line))
                    size += len(line)
            if self.torn:
                os.truncate(path, size)
        self.size = size
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.read_fd = os.open(path, os.O_RDONLY)

    def __contains__(self, key) -> bool:
        return key in self.index

    def __len__(self) -> int:
        return len(self.index)

    def append(self, record: dict) -> bool:
        """Write one record (it must have "id" and "sample"); False if its key is already there."""
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        key = (record["id"], record["sample"])
        with self.lock:
            if key in self.index:
                return False
            view = memoryview(line)
            while view:
                view = view[os.write(self.fd, view) :]
            self.index[key] = (self.size, len(line))
            self.size += len(line)
        return True

    def read(self, key) -> dict:
        offset, length = self.index[key]
        return json.loads(os.pread(self.read_fd, length, offset))

    def close(self):
        os.close(self.fd)
        os.close(self.read_fd)
