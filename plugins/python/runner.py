# MCP-Forge stateless Python runner. Runs /forge/in/code.py as the user's
# program: every statement executes, the value of a final expression is
# returned, and a JSON envelope goes to /forge/meta/result.json. stdout and
# stderr stay the program's own (capped, with totals counted).
#
# Resident mode (FORGE_CHAN set, see sdk/oneshot "The resident runner"): the
# runner starts, does its imports, then listens on the unix socket
# $FORGE_CHAN/runner.sock, accepts ONE connection, reads one request line
# ({"code": ..., "max_output": N}), runs it exactly as above, writes the
# envelope as one line on the same connection and exits. Its stdout and
# stderr are files ($FORGE_META/stdout, stderr) that the container's command
# opened for appending; they are emptied when the request arrives, so only
# the program's output is returned.
import ast
import base64
import io
import json
import linecache
import os
import socket
import stat
import sys
import traceback

IN = os.environ.get("FORGE_IN", "/forge/in")
META = os.environ.get("FORGE_META", "/forge/meta")
OUT = os.environ.get("FORGE_OUT", "/forge/out")
CHAN = os.environ.get("FORGE_CHAN", "")
CAP = int(os.environ.get("FORGE_MAX_OUTPUT", "1048576"))
REPR_CAP = int(os.environ.get("FORGE_MAX_REPR", "65536"))
FILENAME = "<code>"
RUNNER = os.path.abspath(__file__)
CONN = None  # resident mode: the host's connection, where the envelope goes
MAX_IMAGE = 0  # resident mode: images up to this size may go in the answer
INLINE_BUDGET = 1 << 20  # what the answer carries besides the envelope (sdk/oneshot inlineAnswer)
IMAGE_TYPES = (".png", ".jpg", ".jpeg", ".svg", ".gif")


class Capped(io.RawIOBase):
    """The program's stdout or stderr as bytes: they pass through to the
    real file descriptor up to CAP, then are only counted. sys.stdout is a
    text stream over it, as Python's own is over its file (with -u), so
    .buffer, fileno(), isatty(), encoding, reconfigure() and writelines()
    all work, and bytes written to .buffer are capped and counted too."""

    def __init__(self, fd):
        self.fd = fd
        self.total = 0
        self.written = 0

    def writable(self):
        return True

    def fileno(self):
        return self.fd

    def isatty(self):
        return False

    def write(self, b):
        b = memoryview(b).cast("B")
        n = len(b)
        self.total += n
        room = CAP - self.written
        if room > 0:
            chunk = b[:room]
            self.written += len(chunk)
            while chunk:
                chunk = chunk[os.write(self.fd, chunk):]
        return n


def text_stream(raw, like):
    """A text stream over raw that encodes as the interpreter's own does."""
    return io.TextIOWrapper(raw, encoding="utf-8", errors=getattr(like, "errors", None) or "strict", write_through=True)


def user_frames(tb):
    """Only frames of the user's code and the libraries it called, never ours."""
    return [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) != RUNNER]


def short(text, n):
    """At most n characters: an exception's message can be megabytes, and
    the answer carrying it has a bound (past it the run's answer is lost)."""
    return text if len(text) <= n else text[:n] + " [...]"


def error_of(e, tb):
    frames = user_frames(tb)
    te = traceback.TracebackException(type(e), e, None)
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.StackSummary.from_list(frames).format()
    lines += list(te.format_exception_only())
    lines = [short(l, 16 << 10) for l in lines[-200:]]
    line = 0
    for f in frames:
        if f.filename == FILENAME:
            line = f.lineno or 0
    return {"name": type(e).__name__, "message": short(str(e), 64 << 10), "traceback": lines, "line": line, "column": 0}


def plain(value):
    """JSON for numpy scalars and small arrays; anything else is not JSON."""
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray) and value.size <= 10000:
            return value.tolist()
    raise TypeError("not JSON serializable")


def save_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for n in plt.get_fignums():
            plt.figure(n).savefig(os.path.join(OUT, "figure_%d.png" % n), format="png")
        plt.close("all")
    except Exception:
        pass


def main(src=None):
    sys.stdout.flush()
    sys.stderr.flush()
    out_raw, err_raw = Capped(sys.__stdout__.fileno()), Capped(sys.__stderr__.fileno())
    out, err = text_stream(out_raw, sys.__stdout__), text_stream(err_raw, sys.__stderr__)
    sys.stdout, sys.stderr = out, err
    env = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": FILENAME}
    result = {}
    code = 0
    if src is None:
        with open(os.path.join(IN, "code.py"), encoding="utf-8") as f:
            src = f.read()
    linecache.cache[FILENAME] = (len(src), None, src.splitlines(True), FILENAME)
    try:
        tree = ast.parse(src, filename=FILENAME)
    except SyntaxError as e:
        result["error"] = {
            "name": type(e).__name__, "message": e.msg, "line": e.lineno or 0, "column": e.offset or 0,
            "traceback": list(traceback.format_exception_only(type(e), e)),
        }
        err.write("".join(result["error"]["traceback"]))
        code = 1
    else:
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        try:
            exec(compile(tree, FILENAME, "exec"), env)
            if last is not None:
                value = eval(compile(last, FILENAME, "eval"), env)
                if value is not None:
                    r = repr(value)
                    result["repr"] = r if len(r) <= REPR_CAP else r[:REPR_CAP] + "... [%d characters]" % len(r)
                    try:
                        j = json.dumps(value, allow_nan=False, default=plain)
                        if len(j) <= REPR_CAP:
                            result["json"] = j
                        else:
                            result["is_repr"] = True
                    except (TypeError, ValueError, RecursionError):
                        result["is_repr"] = True
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException as e:  # noqa: B036 - KeyboardInterrupt too
            result["error"] = error_of(e, e.__traceback__)
            traceback_text = "".join(result["error"]["traceback"])
            err.write(traceback_text)
            code = 1
    save_figures()
    try:
        out.flush()
        err.flush()
    except Exception:
        pass
    result["stdout_bytes"] = out_raw.total
    result["stderr_bytes"] = err_raw.total
    result["exit_code"] = code
    if CHAN:
        # Whatever bypassed the cap (a subprocess, os.write) is counted and cut
        # here, so the host can read the files whole.
        for fd, key in ((1, "stdout_bytes"), (2, "stderr_bytes")):
            try:
                size = os.fstat(fd).st_size
                result[key] = max(result[key], size)
                if size > CAP:
                    os.ftruncate(fd, CAP)
            except OSError:
                pass
        try:
            result["inline"] = inlined()
        except (OSError, ValueError):
            pass  # the host reads the files
        try:
            CONN.sendall((json.dumps(result) + "\n").encode())
            # Exit only once the host has the answer (it closes its end):
            # under gVisor the relay that carries it to the host is a
            # process of this sandbox, which ends with the runner.
            CONN.shutdown(socket.SHUT_WR)
            CONN.settimeout(10)
            while CONN.recv(65536):
                pass
        except OSError:
            pass  # the code closed it: the host reports from the exit
        try:
            CONN.close()
        except OSError:
            pass

    else:
        with open(os.path.join(META, "result.json"), "w") as f:
            json.dump(result, f)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    os._exit(code)


def read_same(path, st):
    """path's content if it is still the regular file st describes, else None."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            return None
        data = os.read(fd, st.st_size + 1)
    finally:
        os.close(fd)
    return data if len(data) == st.st_size else None


def inlined():
    """The program's output and the images it left, for the answer (sdk/oneshot
    "inlined"): the host then reads no file, which on Kubernetes is a round
    trip through the API server each. Within INLINE_BUDGET in all; a part
    that does not fit (or a descriptor the code replaced) is left out and
    the host reads its files. An image over MAX_IMAGE is listed without
    data, as the host's read would skip it; empty files are not images."""
    budget = INLINE_BUDGET
    inline = {}
    out = {}
    for fd, key in ((1, "stdout"), (2, "stderr")):
        # fd is write-only: the file the host would read, if it still is fd's
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > budget:
            break
        data = read_same(os.path.join(META, key), st)
        if data is None:
            break
        budget -= len(data)
        out[key] = base64.b64encode(data).decode()
    else:
        inline["output"] = out
    if MAX_IMAGE <= 0:
        return inline
    files = []
    with os.scandir(OUT) as it:
        names = sorted(e.name for e in it)
    for name in names:
        if not name.lower().endswith(IMAGE_TYPES):
            continue
        path = os.path.join(OUT, name)
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            continue
        if len(files) >= 256:  # sdk/oneshot maxInlineFiles
            return inline
        if st.st_size > MAX_IMAGE:
            files.append({"name": name, "size": st.st_size})
            continue
        if st.st_size > budget:
            return inline
        data = read_same(path, st)
        if data is None:
            return inline
        budget -= len(data)
        files.append({"name": name, "size": len(data), "data": base64.b64encode(data).decode()})
    inline["files"] = files
    return inline


def resident():
    """Wait for one request on the runner's socket, then run it like main()."""
    global CAP, CONN, MAX_IMAGE
    # Modules the operator asked to have ready (a warm container's point).
    for name in filter(None, os.environ.get("FORGE_PRELOAD", "").split(",")):
        try:
            __import__(name.strip())
        except Exception:
            pass
    path = os.path.join(CHAN, "runner.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o666)  # the host connects as another user
    srv.listen(1)  # last: accepting means "ready"
    CONN, _ = srv.accept()
    # Exactly one connection: later ones are refused, and the socket goes.
    srv.close()
    os.unlink(path)
    # One line: JSON escapes newlines inside strings.
    with CONN.makefile("rb") as f:
        req = json.loads(f.readline().decode("utf-8"))
    CAP = int(req.get("max_output") or CAP)
    MAX_IMAGE = int(req.get("max_image") or 0)
    # Forget what start-up printed: the program's output starts here.
    for fd in (1, 2):
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
    main(req["code"])


if CHAN:
    resident()
else:
    main()
