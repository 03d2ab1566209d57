# Saves the session's workspace for checkpoint_session (backend.Checkpoint):
# save() of every variable but connections, which could not come back.
local({
  nm <- ls(globalenv())
  isconn <- vapply(nm, function(n) inherits(get(n, envir = globalenv()), "connection"), logical(1))
  ok <- nm[!isconn]; bad <- nm[isconn]
  save(list = ok, file = ".forge-checkpoint", envir = globalenv())
  q <- function(x) encodeString(x, quote = '"')
  cat("__FORGE_CKPT__", '{"saved":[', paste(q(ok), collapse = ","), '],"skipped":{',
      paste0(q(bad), ':"an open connection: reopen it after restoring"', collapse = ","), '}}', "\n", sep = "")
})
