# Saves the session's namespace for checkpoint_session (backend.Checkpoint).
# dill pickles what pickle cannot (functions and lambdas defined in the
# session, by value; modules by reference). Each variable is tried on its
# own, so one that cannot be saved is reported, not fatal. Open files are
# left out on purpose: their position and the file behind them would not
# come back as they were. The core replaces __FORGE_CKPT_NONCE__ with a
# token of this run and reads only the line carrying it: a value whose
# pickling prints a marker line of its own is not mistaken for the report.
def _forge_ckpt():
    import dill, io, json
    dill.settings['recurse'] = True
    keep, skipped = {}, {}
    for k, v in list(globals().items()):
        if k.startswith('_') or k in ('In', 'Out', 'exit', 'quit', 'get_ipython'):
            continue
        if isinstance(v, io.IOBase):
            skipped[k] = 'an open file handle (%s): reopen it after restoring' % type(v).__name__
            continue
        try:
            dill.dumps(v)
            keep[k] = v
        except Exception as e:
            skipped[k] = ('%s: %s' % (type(e).__name__, e))[:300]
    with open('.forge-checkpoint', 'wb') as f:
        dill.dump(keep, f)
    print('\n__FORGE_CKPT__' + '__FORGE_CKPT_NONCE__' + json.dumps({'saved': sorted(keep), 'skipped': skipped}), flush=True)
_forge_ckpt()
del _forge_ckpt
