# Loads a workspace saved by checkpoint_save.R (backend.Checkpoint): the
# packages it had attached first (in their order, so that masking is as it
# was), then the variables.
local({
  e <- new.env(parent = emptyenv())
  nm <- setdiff(load(".forge-checkpoint", envir = e), "__forge_packages__")
  for (p in setdiff(get0("__forge_packages__", envir = e, inherits = FALSE, ifnotfound = character(0)), .packages())) {
    # A package the image no longer has must not lose the variables: say so.
    tryCatch(suppressPackageStartupMessages(library(p, character.only = TRUE)),
             error = function(err) message("checkpoint: package ", p, " could not be attached again: ", conditionMessage(err)))
  }
  for (n in nm) assign(n, get(n, envir = e), envir = globalenv())
  rep <- jsonlite::toJSON(list(saved = I(nm)))
  cat("\n__FORGE_CKPT__", "__FORGE_CKPT_NONCE__", enc2utf8(as.character(rep)), "\n", sep = "")
})
