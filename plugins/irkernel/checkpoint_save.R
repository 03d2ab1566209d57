# Saves the session's workspace for checkpoint_session (backend.Checkpoint):
# save() of every variable but connections, which could not come back. The
# report is written by jsonlite (any name: quotes, backslashes, non-ASCII,
# none skipped); the core replaces __FORGE_CKPT_NONCE__ with a token of this
# run and reads only the line carrying it.
# Dot-names are saved too (all.names: .Random.seed is the RNG's state), but
# for the kernel's own: pbdZMQ keeps its sockets in .pbd_env, which a load
# must never replace. The attached packages are saved beside
# the variables, under a name the report leaves out, for the load to attach
# them again: a function from library(x) must still be found after restore.
local({
  g <- globalenv()
  nm <- setdiff(ls(g, all.names = TRUE), ".pbd_env")
  # get() runs an active binding: one that fails is skipped, not fatal.
  why <- vapply(nm, function(n) tryCatch(
    if (inherits(get(n, envir = g), "connection")) "an open connection: reopen it after restoring" else "",
    error = function(e) substr(paste("reading it failed:", conditionMessage(e)), 1, 300)), "", USE.NAMES = FALSE)
  ok <- nm[why == ""]; bad <- nm[why != ""]
  out <- new.env(parent = emptyenv())
  for (n in ok) assign(n, get(n, envir = g), envir = out) # no copy: R copies on change
  assign("__forge_packages__", rev(.packages()), envir = out)
  save(list = ls(out, all.names = TRUE), file = ".forge-checkpoint", envir = out)
  skipped <- structure(as.list(why[why != ""]), names = bad)
  rep <- jsonlite::toJSON(list(saved = I(ok), skipped = skipped), auto_unbox = TRUE)
  cat("\n__FORGE_CKPT__", "__FORGE_CKPT_NONCE__", enc2utf8(as.character(rep)), "\n", sep = "")
})
