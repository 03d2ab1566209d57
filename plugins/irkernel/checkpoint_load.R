# Loads a workspace saved by checkpoint_save.R (backend.Checkpoint).
local({
  nm <- load(".forge-checkpoint", envir = globalenv())
  cat("__FORGE_CKPT__", '{"saved":[', paste(encodeString(nm, quote = '"'), collapse = ","), ']}', "\n", sep = "")
})
