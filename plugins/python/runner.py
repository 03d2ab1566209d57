# MCP-Forge stateless Python runner. Runs /forge/in/code.py as the user's
# program: every statement executes, the value of a final expression is
# returned, and a JSON envelope goes to /forge/meta/result.json. stdout and
# stderr stay the program's own (capped, with totals counted).
import ast
import io
import json
import linecache
import os
import sys
import traceback

IN = os.environ.get("FORGE_IN", "/forge/in")
META = os.environ.get("FORGE_META", "/forge/meta")
OUT = os.environ.get("FORGE_OUT", "/forge/out")
CAP = int(os.environ.get("FORGE_MAX_OUTPUT", "1048576"))
REPR_CAP = int(os.environ.get("FORGE_MAX_REPR", "65536"))
FILENAME = "<code>"
RUNNER = os.path.abspath(__file__)


class Capped(io.TextIOBase):
    """Passes text through up to CAP bytes, then only counts."""

    def __init__(self, inner):
        self.inner = inner
        self.total = 0
        self.written = 0

    def writable(self):
        return True

    def write(self, s):
        b = len(s.encode("utf-8", "replace"))
        self.total += b
        if self.written < CAP:
            room = CAP - self.written
            if b > room:
                s = s.encode("utf-8", "replace")[:room].decode("utf-8", "ignore")
                b = room
            self.inner.write(s)
            self.written += b
        return len(s)

    def flush(self):
        self.inner.flush()

    def fileno(self):
        return self.inner.fileno()

    def isatty(self):
        return False

    @property
    def encoding(self):
        return "utf-8"


def user_frames(tb):
    """Only frames of the user's code and the libraries it called, never ours."""
    return [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) != RUNNER]


def error_of(e, tb):
    frames = user_frames(tb)
    te = traceback.TracebackException(type(e), e, None)
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.StackSummary.from_list(frames).format()
    lines += list(te.format_exception_only())
    line = 0
    for f in frames:
        if f.filename == FILENAME:
            line = f.lineno or 0
    return {"name": type(e).__name__, "message": str(e), "traceback": lines, "line": line, "column": 0}


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


def main():
    out, err = Capped(sys.stdout), Capped(sys.stderr)
    sys.stdout, sys.stderr = out, err
    env = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": FILENAME}
    result = {}
    code = 0
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
    result["stdout_bytes"] = out.total
    result["stderr_bytes"] = err.total
    result["exit_code"] = code
    with open(os.path.join(META, "result.json"), "w") as f:
        json.dump(result, f)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    os._exit(code)


main()
