# Run by ipykernel as it starts (IPyKernelCommand: exec_lines), before any
# session code. A cell's matplotlib figures come back as images whatever
# backend the code chose: the inline backend shows and closes them itself,
# but code that calls matplotlib.use('Agg') (or %matplotlib agg, or any
# backend but inline) leaves them open and unseen. After each cell, the
# figures still open under such a backend are sent as display_data
# image/png, rendered as the stateless runner renders them (savefig as PNG),
# and closed, as the inline backend closes its own.
#
# Everything lives in the closure of __forge_figures, not in the user's
# namespace: %reset (RestartSession) empties that namespace, and the hook
# must outlive it.
def __forge_figures():
    import sys

    inline = "module://matplotlib_inline.backend_inline"

    def capture(result=None):
        # Every cell pays for this: a cell that never imported pyplot costs
        # one dictionary lookup, and one that did, a look at the figure list.
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            nums = plt.get_fignums()
            # Under inline, its own post_execute hook has shown and closed
            # the figures already, or keeps them open because the user asked
            # it to (InlineBackend.close_figures = False).
            if not nums or plt.get_backend() == inline:
                return
        except Exception:
            return
        import base64
        import io

        from IPython.display import publish_display_data

        try:
            for n in nums:
                buf = io.BytesIO()
                fig = plt.figure(n)
                try:
                    fig.savefig(buf, format="png")
                except Exception as e:
                    print("matplotlib figure %d was not returned: it could not be drawn as PNG: %s: %s" % (n, type(e).__name__, e), file=sys.stderr)
                    continue
                publish_display_data({"image/png": base64.b64encode(buf.getvalue()).decode("ascii"), "text/plain": repr(fig)})
        finally:
            plt.close("all")

    get_ipython().events.register("post_run_cell", capture)


__forge_figures()
del __forge_figures
