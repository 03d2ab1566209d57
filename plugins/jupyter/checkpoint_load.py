# Loads a namespace saved by checkpoint_save.py (backend.Checkpoint).
def _forge_restore():
    import dill, json
    with open('.forge-checkpoint', 'rb') as f:
        d = dill.load(f)
    globals().update(d)
    print('\n__FORGE_CKPT__' + '__FORGE_CKPT_NONCE__' + json.dumps({'saved': sorted(d)}), flush=True)
_forge_restore()
del _forge_restore
