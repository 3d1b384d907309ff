"""ddprun's PyTorch progress hook (--hang_detect=torch), loaded by the workers' Python through
PYTHONPATH. It changes nothing the user's program does (it only wraps five functions, in
_ddprun_torch_p2p.py beside it, which still return what they did and raise what they did): a
daemon thread reads PyTorch's own flight recorders (the generic one, Gloo's, and NCCL's own;
TORCH_FR_BUFFER_SIZE, set by ddprun) a few times a second and, when a collective has been entered
or finished since the last look,
touches DDPRUN_HEARTBEAT_FILE and writes
$DDPRUN_TORCH_DIR/progress_<RANK>: one line per process group the rank used, its last collective
there, "<seq> <op> <entered|retired> <group> <ranks|*> <desc>", the newest last, then one line per
point-to-point operation it waits in, "p2p <send|recv> <peer|*> <group> <ranks|*> <desc>" (Gloo's
flight recorder does not record them: the hook wraps send, recv and batch_isend_irecv as
torch.distributed is imported; entering or finishing one is progress too) (and monitored_barrier,
made of such operations inside PyTorch: a line "<calls> monitored_barrier
<entered|retired|raised> <group>:monitored_barrier ...", a sequence of its own; "raised" for good
once one raised) (and once, in python_<RANK>, "<pid> <sys.executable>": where the rank's Python
is, for ddprun's dump; the rank's Python is the first of its Pythons to make a process group,
claimed in owner_<RANK>: under a Python wrapper that starts the trainer as a child, the child).
After destroy_process_group, once the main module has finished (before the interpreter joins the
program's threads), and when the interpreter exits (after the program's own exit handlers), it
removes the heartbeat file: the rank is finishing, no beat is due any more, only its exit
(ddprun's --exit_timeout); a process group made again (as its init begins), or a collective made
after that, creates the file again. A main module that ended without raising is said in
finished_<RANK> ("<pid>"): a crash of the rank after that was in its teardown, not restarted.
On each of ddprun's requests (a new token in $DDPRUN_TORCH_DIR/dump_request) it writes the flight
recorder to TORCH_FR_DUMP_TEMP_FILE<RANK> where PyTorch has no dump pipe of its own (Gloo). Then it
imports the user's own sitecustomize."""
import atexit
import os
import pickle
import sys
import threading
import time

import _ddprun_torch_p2p as _p2p

_PERIOD = 0.25  # seconds between looks at the flight recorder


def _write(path, text):
    """Writes the file whole: a reader never sees half of it. The temporary file is this
    thread's own: the watcher and init_process_group's caller may write the same file at once,
    and one shared name was moved away under the other (FileNotFoundError out of the user's
    init_process_group, seen in CI)."""
    tmp = "%s.%d.%d.tmp" % (path, os.getpid(), threading.get_ident())
    try:
        with open(tmp, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


# The flight recorders read: PyTorch's generic one (Gloo's collectives) and, in a CUDA build,
# NCCL's own (FlightRecorderCUDA), the only one that records NCCL's collectives.
_RECORDERS = ("_dump_fr_trace", "_dump_nccl_trace")


def _recorded(c10d):
    """Each flight recorder's entries, oldest first ([] where this PyTorch has no such one)."""
    out = []
    for name in _RECORDERS:
        dump = getattr(c10d, name, None)
        out.append(pickle.loads(dump(True, False, False)).get("entries", []) if dump else [])
    return out


def _probe(c10d):
    """Each flight recorder's per-group collective counters (enqueued, started, completed), read
    without its entries: cheap (microseconds, where reading the entries takes milliseconds per
    thousand), and changed whenever a collective is made or ends. None where this PyTorch's dump
    has no such counters: every look then reads the entries."""
    out = []
    for name in _RECORDERS:
        dump = getattr(c10d, name, None)
        status = pickle.loads(dump(False, False, False)).get("pg_status") if dump else {}
        if status is None:
            return None
        out.append(repr(sorted(status.items())))
    return tuple(out)


def _merged(recorded):
    """The recorders' entries in the order they were made (a group with both backends,
    "cpu:gloo,cuda:nccl", has entries in both)."""
    if sum(1 for entries in recorded if entries) <= 1:
        return next((entries for entries in recorded if entries), [])
    return sorted((e for entries in recorded for e in entries),
                  key=lambda e: e.get("time_created_ns", 0))


def _position(recorded):
    """How far the recorders have come: per recorder, its last entry's record id and whether it
    retired ((-1, False) while it has none). Its changing is progress."""
    return tuple((entries[-1].get("record_id", -1), bool(entries[-1].get("retired")))
                 if entries else (-1, False) for entries in recorded)


_members = {}  # process group name -> (its global ranks, "*" for the whole world; its desc)


def _group_members(dist, name):
    """The global ranks of the process group named `name`, from PyTorch's own registry (the
    flight recorder of Gloo does not say them); ("?", "") while it cannot tell."""
    if name not in _members:
        try:
            c10d_py = dist.distributed_c10d
            default = c10d_py._get_default_group()
            for pg, pg_name in list(c10d_py._world.pg_names.items()):
                ranks = "*" if pg is default else ",".join(
                    str(r) for r in sorted(dist.get_process_group_ranks(pg)))
                _members[pg_name] = (ranks, getattr(pg, "group_desc", "") or "")
        except Exception:  # the main thread is changing the registry: asked again next time
            return ("?", "")
    return _members.get(name, ("?", ""))


def _word(text):
    return "".join(c if c.isprintable() and not c.isspace() else "_" for c in str(text)) or "_"


def _progress(dist, entries, last):
    """Each process group's last collective in `entries`, and its last monitored_barrier, merged
    into `last` (group name -> (order, line)): a group whose records left the recorder's ring
    keeps its last. Ordered by when each was entered (the flight recorder's time_created_ns,
    the wall clock's, as the barriers' times), the newest last."""
    for e in entries:
        name = str((e.get("process_group") or ("0",))[0])
        ranks, desc = _group_members(dist, name)
        state = "retired" if e.get("retired") else "entered"
        order = (e.get("time_created_ns", 0), e.get("record_id", 0))
        last[name] = (order, "%d %s %s %s %s %s\n" % (
            e.get("collective_seq_id", 0), _word(e.get("profiling_name", "?")), state,
            _word(name), ranks, " ".join(str(desc).split())))
    for name, (calls, state, entered_ns, _) in _p2p.barriers():
        ranks, desc = _group_members(dist, name)
        # A sequence of its own, as a group of its own: every member calls it as often.
        pseudo = name + ":monitored_barrier"
        last[pseudo] = ((entered_ns, 0), "%d monitored_barrier %s %s %s %s\n" % (
            calls, state, _word(pseudo), ranks, " ".join(str(desc).split())))
    return "".join(line for _, line in sorted(last.values(), key=lambda v: v[0]))


def _p2p_lines(dist):
    """The point-to-point operations still waiting, as progress lines."""
    lines = []
    for op, peer, group in _p2p.waiting():
        ranks, desc = _group_members(dist, group)
        lines.append("p2p %s %s %s %s %s\n" % (op, peer, _word(group), ranks,
                                              " ".join(str(desc).split())))
    return "".join(lines)


def _name_groups(trace, dist):
    """Gloo's flight recorder (torch 2.12) registers its groups without their names or ranks:
    pg_config {"": ...} while the entries say process_group ("0", "default_pg"), and fr_trace
    cannot match the two (KeyError). Each group the entries name gets its entry here, its ranks
    from PyTorch's registry (or as the hook saw them); the entries of a group destroyed before
    the hook ever saw it are left out (nothing says its ranks, and it waits for nothing now)."""
    config = trace.get("pg_config", {})
    if list(config) != [""]:
        return trace  # PyTorch named them (NCCL)
    blank = config.pop("")
    world = list(range(dist.get_world_size()))
    kept = []
    for e in trace.get("entries", []):
        name, desc = (tuple(e.get("process_group", ())) + ("", ""))[:2]
        ranks, _ = _group_members(dist, name)
        if ranks == "?":
            continue
        kept.append(e)
        ranks = world if ranks == "*" else [int(r) for r in ranks.split(",")]
        config[name] = dict(blank, name=name, desc=desc, ranks=str(ranks))
    trace["entries"] = kept
    return trace


def _dump(c10d, rank):
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "")
    if not prefix or os.path.exists(os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "\0") +
                                    rank + ".pipe"):
        return  # none wanted, or PyTorch's own pipe (NCCL) dumps it
    trace = pickle.loads(c10d._dump_fr_trace())
    _write(prefix + rank, pickle.dumps(_name_groups(trace, sys.modules["torch.distributed"])))


def _initialized(dist):
    # The module may be half imported (by the main thread) at this moment.
    try:
        return dist is not None and dist.is_initialized()
    except (AttributeError, ImportError):
        return False


_lock = threading.Lock()  # a beat never recreates the file the exit handler removed
_exiting = False
# When the main module finished: the flight recorder's last record then. Progress of that record
# or an earlier one (seen late) is the main module's own and does not make the rank run again.
_finished_through = None
_rank_pid = None  # the rank's process: the one that claimed it (_claim)
# The process that claimed the rank last, kept past _release (destroy_process_group): its exit,
# its failure and a process group it makes again are the rank's (attack 104).
_spoke_pid = None


def _beat(heartbeat, record_ids=None):
    """Touches the heartbeat file, creating it again if the rank had said it was finishing;
    `record_ids`, per flight recorder the last entry's, when collectives moved: one the rank
    made after it said so is running again, one it had made before is not."""
    global _finished_through
    with _lock:
        if not heartbeat or _exiting:
            return
        if _finished_through is not None:
            if record_ids is not None and all(
                    r <= through for r, through in zip(record_ids, _finished_through)):
                return
            _finished_through = None
        try:
            os.close(os.open(heartbeat, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            os.utime(heartbeat)
        except OSError:
            pass  # a missed beat; never disturb the job


def _keep_writing(unwritten, write, *args):
    """Runs write(*args); a file it cannot write (a full disk, the log directory removed) is said
    once and the watcher goes on beating: stopping made a rank that trains look hung. Returns
    whether a write has failed so far."""
    try:
        write(*args)
    except OSError as e:
        if not unwritten:
            sys.stderr.write("ddprun torch hook: %s: the hang report will lack this rank's "
                             "collectives; its heartbeat goes on\n" % e)
        return True
    return unwritten


def _watch(torch_dir, heartbeat, rank):
    seen, answered, was_initialized, finished = None, None, False, False
    unwritten = False  # a progress or dump file could not be written (said once)
    probed = None  # the counters when the entries were last read (_probe)
    groups = {}  # each process group's last collective (_progress)
    request = os.path.join(torch_dir, "dump_request")
    while True:
        time.sleep(_PERIOD)
        if _exiting:
            # The exit handlers have run; the interpreter ends next. A thread inside a PyTorch
            # call that gives the GIL up as that happens aborts the whole process on its return
            # ("terminate called without an active exception"): none is begun any more.
            return
        if not _initialized(sys.modules.get("torch.distributed")):
            # After destroy_process_group no collective is due: the rank is finishing (saving,
            # tearing down). It says so once; ddprun then awaits its exit (--exit_timeout).
            if was_initialized:
                was_initialized, finished = False, True
                _finishing(heartbeat)
                _release(torch_dir, rank)  # a child (a trainer it starts now) may claim the rank
            continue
        dist = sys.modules["torch.distributed"]
        if not was_initialized:  # the rank's training process (under a wrapper script, too)
            if not _speak_for(torch_dir, rank):
                continue  # another Python of the rank speaks for it: asked again while it lives
            if finished:  # a process group again after a destroyed one: running again
                finished = False
                _beat(heartbeat)
            _members.clear()  # a process group made again: its groups are new
            groups.clear()
            _p2p.forget_dead_barriers(dist.distributed_c10d)
            _p2p.wrap(dist.distributed_c10d)  # imported some other way than _p2p.Finder saw
        was_initialized = True
        import torch._C._distributed_c10d as c10d
        try:
            p2p = _p2p_lines(dist)
            # The entries are read only when a counter moved: an idle rank with a large
            # recorder (TORCH_FR_BUFFER_SIZE) kept a CPU busy unpickling them (attack 83).
            counters = (_probe(c10d), _p2p.changes())
            if counters[0] is None or counters != probed:
                probed = counters
                recorded = _recorded(c10d)
                entries = _merged(recorded)
                now = (_position(recorded), _p2p.changes())
            else:
                entries, now = (), seen
            if now != seen and (entries or p2p or _p2p.barriers() or seen is not None):
                collectives_moved = seen is None or now[0] != seen[0]
                seen = now
                _beat(heartbeat, tuple(r for r, _ in now[0]) if collectives_moved else None)
                unwritten = _keep_writing(unwritten, _write, os.path.join(
                    torch_dir, "progress_" + rank), _progress(dist, entries, groups) + p2p)
            token = _read(request)
            if token is not None and token != answered:  # each request once
                answered = token
                unwritten = _keep_writing(unwritten, _dump, c10d, rank)
        except Exception as e:  # never disturb the job: say so once and stop looking
            sys.stderr.write("ddprun torch hook: %s: progress off\n" % e)
            return


def _finishing(heartbeat, through=None):
    global _finished_through
    with _lock:
        if not heartbeat or os.getpid() != _rank_pid:
            return  # a forked child's exit (a DataLoader worker's) is not the rank's
        if _failed:
            return  # its program raised: not finishing (the watcher may see a destroy late)
        _finished_through = through
        try:
            os.unlink(heartbeat)
        except OSError:
            pass  # gone already: nothing to say


def _note_main_finished():
    """Writes finished_<RANK> in DDPRUN_TORCH_DIR: the rank's main module ended without raising
    (the interpreter exits next). ddprun takes a crash of the rank after this for one in its
    teardown, its program finished, and does not restart it; a crash after destroy_process_group
    alone (a second process group to come, a save) is restarted as any (attack 104)."""
    torch_dir = os.environ.get("DDPRUN_TORCH_DIR", "")
    if not torch_dir or _failed or os.getpid() not in (_rank_pid, _spoke_pid):
        return
    try:
        _write(os.path.join(torch_dir, "finished_" + os.environ.get("RANK", "0")),
               "%d\n" % os.getpid())
    except OSError:
        pass  # unwritten: a crash at its exit is then restarted, as without the hook


def _forget_finished(torch_dir, rank):
    """At a Python's start: a finished_<RANK> of a Python of the rank that is gone (the first
    stage of a wrapper script that runs two) says nothing of this one, which may crash before
    it makes a process group (attack 106). One of a Python still alive (the rank's, finished,
    that started this helper) stays."""
    path = os.path.join(torch_dir, "finished_" + rank)
    try:
        pid = int((_read(path) or "0").split()[0])
    except (ValueError, IndexError):
        pid = 0
    if pid > 0 and _alive(pid):
        return
    try:
        os.unlink(path)
    except OSError:
        pass  # none (the usual), or not ours to remove


def _at_exit(heartbeat):
    global _exiting
    with _lock:
        _exiting = True
    _finishing(heartbeat)
    _note_main_finished()  # where threading._shutdown could not be wrapped
    torch_dir = os.environ.get("DDPRUN_TORCH_DIR", "")
    if torch_dir:
        _release(torch_dir, os.environ.get("RANK", "0"))  # another Python of the rank may go on


_failed = False  # the main module raised: never finishing


def _wrap_thread_shutdown(heartbeat):
    """The interpreter joins the program's non-daemon threads (threading._shutdown) before it
    runs the exit handlers: the main module has finished then, and a thread never joined is a
    hang at exit, not a hang to restart the program for. A thread still training there makes
    collectives, and its beats create the file again. A main module that raised (the
    interpreter printed it: sys.last_value) has not finished: it failed, and a thread that
    keeps it from exiting makes an ordinary hang, restarted as a failure is, also where it
    destroyed its process group before (that said it was finishing: the heartbeat file is made
    again). So has a multiprocessing trainer whose target failed (taken for finished, not
    restarted: attack 92). A SystemExit leaves no trace the hook can read: sys.exit(3) there is
    taken for finished. (A sys.exit wrapper could not tell one that was caught, attack 94; one
    raising a subclass of SystemExit, told by when it was freed, changed what programs see:
    type(e) is SystemExit, the silence of a thread's SystemExit, pickling; and a caught one kept
    in a thread's locals was freed as one that ended the program: attack 103.)"""
    joins = getattr(threading, "_shutdown", None)
    if joins is None:
        return

    def _shutdown():
        global _failed
        if getattr(sys, "last_exc", None) is not None or getattr(sys, "last_value", None):
            if os.getpid() in (_rank_pid, _spoke_pid):  # after destroy_process_group too
                with _lock:
                    _failed = True
                _beat(heartbeat)  # not finishing: it failed
            return joins()
        if _failed_process_target():
            return joins()
        through = None
        try:
            if _initialized(sys.modules.get("torch.distributed")):
                import torch._C._distributed_c10d as c10d
                through = tuple(r for r, _ in _position(_recorded(c10d)))
                # A main module that ended before the watcher's first look (it looks every
                # _PERIOD) has not claimed the rank yet: it does now, as that look would.
                torch_dir = os.environ.get("DDPRUN_TORCH_DIR", "")
                if _rank_pid is None and torch_dir:
                    _claim(torch_dir, os.environ.get("RANK", "0"))
        except Exception:  # never disturb the exit: then any later progress counts
            pass
        _finishing(heartbeat, through)
        _note_main_finished()
        return joins()

    threading._shutdown = _shutdown


def _failed_process_target():
    """Whether threading._shutdown's caller is multiprocessing's Process._bootstrap after its
    target failed (it catches the exception, then joins the threads, knowing the exit code).
    The interpreter's own call, at exit, has no Python caller."""
    try:
        frame = sys._getframe(2)  # this function's caller's caller
        code = frame.f_code
        if code.co_name != "_bootstrap" or "multiprocessing" not in code.co_filename:
            return False
        return frame.f_locals.get("exitcode", 0) not in (None, 0)
    except Exception:
        return False


def _alive(pid):
    """Whether process `pid` runs (a zombie, exited but not yet waited for, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's: alive
    stat = _read("/proc/%d/stat" % pid) or ""
    return stat[stat.rfind(")") + 2:][:1] != "Z"


def _claim(torch_dir, rank):
    """Whether this process speaks for the rank: the first of the rank's Pythons to make a process
    group (the rank's own process, or the trainer that a Python wrapper started) claims it in
    owner_<RANK>, with its pid; the others (the wrapper, DataLoader workers, any child) neither beat
    nor, exiting, say the rank is finishing. A claim of a process that is gone is taken over."""
    global _rank_pid, _spoke_pid
    if _rank_pid == os.getpid():
        return True
    path = os.path.join(torch_dir, "owner_" + rank)
    mine = "%s.%d" % (path, os.getpid())
    try:
        with open(mine, "w") as f:
            f.write("%d\n" % os.getpid())
        for _ in range(2):
            try:
                os.link(mine, path)  # whole, and only if no one has claimed it
            except FileExistsError:
                try:
                    pid = int((_read(path) or "").split()[0])
                except (ValueError, IndexError):
                    return False  # unreadable: someone else's
                if pid != os.getpid() and _alive(pid):
                    return False
                if pid != os.getpid():
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
                    continue
            _rank_pid = _spoke_pid = os.getpid()
            return True
        return False
    except OSError as e:
        # No claim can be written (the directory full or gone, no hard links there). This Python
        # made a process group: it speaks for the rank unclaimed, once said, rather than leave it
        # unwatched, its hang never found, without a word (attack 102: a full disk).
        sys.stderr.write("ddprun torch hook: cannot claim rank %s in %s (%s): this process "
                         "speaks for it unclaimed\n" % (rank, torch_dir, e))
        _rank_pid = _spoke_pid = os.getpid()
        return True
    finally:
        try:
            os.unlink(mine)
        except OSError:
            pass


def _speak_for(torch_dir, rank):
    """Claims the rank (_claim) and names this process as its Python for a dump."""
    if not _claim(torch_dir, rank):
        return False
    try:
        _write(os.path.join(torch_dir, "python_" + rank),
               "%d %s\n" % (os.getpid(), sys.executable))
    except OSError:
        pass  # the directory is gone or full: a dump then has no Python to name, nothing more
    return True


def _on_init():
    """A process group made (the wrapped init_process_group): this process is watched, and claims
    the rank at once rather than at the watcher's next look. A group made and destroyed between
    two looks left the rank unclaimed: its exit was never said, and a hang at exit went unseen
    (attack 89)."""
    try:
        _watch_here()
        if _watch_args is not None and _watch_args[0]:
            _speak_for(_watch_args[0], _watch_args[2])
    except Exception as e:  # never out of the user's init_process_group
        sys.stderr.write("ddprun torch hook: %s: this rank is not claimed at its init\n" % e)


def _init_begins():
    """A process group is being made (the wrapped init_process_group, before PyTorch's own): in
    the process that spoke for the rank before, one made again after destroy_process_group, the
    rank runs again from now. The heartbeat file is made again at once, not at the watcher's
    next look after the init returned: a hang or a crash inside the init is then the running
    program's, restarted, not one of a finished program at its exit (attack 104). The first
    group's init is left to --startup_timeout, as before."""
    try:
        if _watch_args is not None and _spoke_pid == os.getpid() and _rank_pid is None:
            _beat(_watch_args[1])
    except Exception:
        pass  # never out of the user's init_process_group


def _release(torch_dir, rank):
    """Gives the rank's claim up (its process group destroyed): the next Python of the rank to
    make one claims it."""
    global _rank_pid
    if _rank_pid != os.getpid():
        return
    _rank_pid = None
    path = os.path.join(torch_dir, "owner_" + rank)
    try:
        if int((_read(path) or "0").split()[0]) == os.getpid():
            os.unlink(path)
    except (ValueError, IndexError, OSError):
        pass


_watch_args = None  # (torch dir, heartbeat file, rank) once _start ran
_watcher_pid = None  # the process whose watcher thread runs


def _watch_here():
    """Starts the watcher thread in this process unless it has one: a forked child (a trainer
    that multiprocessing started with fork or forkserver) has none, and is watched once it makes
    a process group. DataLoader workers, which make none, get no thread."""
    global _watcher_pid
    if _watch_args is None or _watcher_pid == os.getpid():
        return
    _watcher_pid = os.getpid()
    try:
        threading.Thread(target=_watch, args=_watch_args, name="ddprun-torch-hook",
                         daemon=True).start()
    except RuntimeError:
        pass  # no thread to be had (a thread limit): unwatched, never disturbed


def _after_fork_in_child():
    """A lock another thread of the parent held at the fork stays held in the child for good:
    new ones. The parent's operations in flight are not the child's."""
    global _lock
    _lock = threading.Lock()
    _p2p.after_fork_in_child()


def _start():
    global _watch_args
    torch_dir = os.environ.get("DDPRUN_TORCH_DIR", "")
    if not torch_dir:
        return
    # In every Python of the rank (a wrapper's child too): the first to make a process group
    # claims the rank (_claim); a forked child has no watcher thread until it makes one
    # (_watch_here), and its inherited claim is its parent's pid, not its own.
    os.makedirs(torch_dir, exist_ok=True)
    _forget_finished(torch_dir, os.environ.get("RANK", "0"))
    heartbeat = os.environ.get("DDPRUN_HEARTBEAT_FILE", "")
    if heartbeat:
        atexit.register(_at_exit, heartbeat)  # registered first: runs after the program's own
        _wrap_thread_shutdown(heartbeat)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _watch_args = (torch_dir, heartbeat, os.environ.get("RANK", "0"))
    _p2p.on_init = _on_init
    _p2p.on_init_begin = _init_begins
    # The watcher starts with torch.distributed: a program that never imports it is left as
    # under torchrun (its own threads counted alone: attack 92).
    if "torch.distributed.distributed_c10d" in sys.modules:
        _watch_here()
    else:
        _p2p.on_import = _watch_here
        sys.meta_path.insert(0, _p2p.Finder())


def _chain():
    """Imports the sitecustomize this one shadows, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = [(i, p) for i, p in enumerate(sys.path) if os.path.abspath(p or ".") == here]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 (runs the user's)
        del sitecustomize
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    finally:
        # Only this directory goes back, where it was: what the user's added stays (its
        # site.addsitedir was undone: attack 89).
        for i, p in ours:
            sys.path.insert(i, p)


_start()
_chain()
