# Saves the session's workspace for checkpoint_session (backend.Checkpoint):
# save() of every variable but connections, which could not come back. The
# report is written by jsonlite (any name: quotes, backslashes, non-ASCII,
# none skipped); the core replaces __FORGE_CKPT_NONCE__ with a token of this
# run and reads only the line carrying it.
local({
  nm <- ls(globalenv())
  isconn <- vapply(nm, function(n) inherits(get(n, envir = globalenv()), "connection"), logical(1), USE.NAMES = FALSE)
  ok <- nm[!isconn]; bad <- nm[isconn]
  save(list = ok, file = ".forge-checkpoint", envir = globalenv())
  skipped <- structure(as.list(rep("an open connection: reopen it after restoring", length(bad))), names = bad)
  rep <- jsonlite::toJSON(list(saved = I(ok), skipped = skipped), auto_unbox = TRUE)
  cat("\n__FORGE_CKPT__", "__FORGE_CKPT_NONCE__", enc2utf8(as.character(rep)), "\n", sep = "")
})
