# Starts ipykernel as ipykernel_launcher does, with its reader of output
# written to file descriptors 1 and 2 (os.write, a C library, a child
# process) replaced: up to 6.x it decodes each 1000-byte read as strict
# UTF-8, so invalid bytes, or a character split between two reads, ended
# its thread; the pipe then filled and the next 64 KiB written blocked the
# cell until its timeout. This one decodes incrementally, replacing invalid
# bytes with U+FFFD.
import codecs, os, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
import ipykernel.iostream as _io
def _watch_pipe_fd(self):
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        bts = os.read(self._fid, 1000)
        while bts and self._should_watch:
            self.write(dec.decode(bts))
            os.write(self._original_stdstream_copy, bts)
            bts = os.read(self._fid, 1000)
    except Exception:
        self._exc = sys.exc_info()
_io.OutStream._watch_pipe_fd = _watch_pipe_fd
del _io, _watch_pipe_fd
from ipykernel import kernelapp
kernelapp.launch_new_instance()
