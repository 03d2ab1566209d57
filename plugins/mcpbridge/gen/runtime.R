  # --- the bridge client (static; the tool functions follow) ---
  max_message <- __MAX_MESSAGE__
  fail <- function(kind, tool, message) {
    cls <- switch(kind, tool = "forge_tool_error", denied = "forge_tool_denied", timeout = "forge_tool_timeout",
      budget = "forge_tool_budget", invalid = "forge_tool_invalid", server = "forge_tool_server", "forge_bridge_error")
    stop(structure(class = unique(c(cls, "forge_bridge_error", "error", "condition")),
      list(message = message, call = NULL, tool = tool, kind = kind)))
  }
  # The link: one long-lived helper per R process, spoken to over two FIFOs
  # (a process per call costs ~30-100 ms of perl start-up; see
  # docs/mcpbridge.md). FORGE_TOOLS_R_ONESHOT=1 uses a process per call.
  link <- new.env(parent = emptyenv())
  link_close <- function() {
    for (k in c("w", "r")) if (!is.null(link[[k]])) try(close(link[[k]]), silent = TRUE)
    link$w <- NULL
    link$r <- NULL
    link$pid <- NULL
  }
  link_open <- function(helper) {
    d <- tempfile("forge-tools-")
    dir.create(d, mode = "0700")
    req <- file.path(d, "req")
    resp <- file.path(d, "resp")
    if (system2("mkfifo", c("-m", "600", shQuote(req), shQuote(resp))) != 0) stop("mkfifo failed")
    system2("perl", c(shQuote(helper), "--fifo", shQuote(req), shQuote(resp)), wait = FALSE)
    link$w <- fifo(req, open = "w", blocking = TRUE)
    link$r <- fifo(resp, open = "r", blocking = TRUE)
    link$pid <- Sys.getpid()
  }
  # link_ready opens the link if needed; FALSE: use a process per call.
  link_ready <- function(helper) {
    if (Sys.getenv("FORGE_TOOLS_R_ONESHOT") == "1") return(FALSE)
    if (!is.null(link$w) && identical(link$pid, Sys.getpid())) return(TRUE)
    # A forked child (parallel::mclapply) gets a helper of its own.
    link_close()
    if (!nzchar(Sys.which("perl")) || !nzchar(Sys.which("mkfifo"))) return(FALSE)
    tryCatch({ link_open(helper); TRUE }, error = function(e) { link_close(); FALSE })
  }
  # roundtrip sends line on the link and returns the answer line. A link
  # that breaks after the request was sent is an error, never a retry: the
  # tool may have run.
  roundtrip <- function(tool, line) {
    answer <- tryCatch({
      writeLines(line, link$w)
      flush(link$w)
      readLines(link$r, n = 1, warn = FALSE)
    }, error = function(e) character(0))
    if (length(answer) == 0) {
      link_close()
      fail("server", tool, paste0(tool, ": the link to the tool bridge broke during the call"))
    }
    # The helper reports a failure of its own as kind "server", then exits.
    if (startsWith(sub("^\\{\"id\":[0-9]+,", "", answer), "\"error\":{\"kind\":\"server\",\"message\":\"forge-tool-call: ")) link_close()
    answer
  }
  oneshot <- function(helper, tool, line) {
    out <- suppressWarnings(system2("perl", shQuote(helper), input = line, stdout = TRUE, stderr = TRUE))
    answer <- grep("^\\{", out, value = TRUE)
    if (length(answer) == 0) fail("bridge", tool, paste0(tool, ": the tool bridge did not answer: ", paste(out, collapse = " ")))
    answer[[1]]
  }
  # call sends one request through the helper and returns the result (the
  # tool's structured content, else its text); images, if any, are the
  # attribute "images" (paths in the output directory).
  call <- function(tool, args) {
    sock <- Sys.getenv("FORGE_TOOLS_SOCKET")
    if (!nzchar(sock)) fail("bridge", tool, "FORGE_TOOLS_SOCKET is not set: this run was not granted any tools (ask with mcp_tools)")
    if (length(args) == 0) args <- structure(list(), names = character(0))
    line <- tryCatch(
      as.character(jsonlite::toJSON(list(id = jsonlite::unbox(1L), tool = jsonlite::unbox(tool), arguments = args),
        null = "null", na = "null", digits = NA, auto_unbox = FALSE)),
      error = function(e) fail("invalid", tool, paste0(tool, ": arguments are not JSON: ", conditionMessage(e))))
    if (nchar(line, type = "bytes") + 1 > max_message) fail("invalid", tool, sprintf("%s: the request is over %d bytes", tool, max_message))
    helper <- file.path(dirname(sock), "bin", "forge-tool-call")
    answer <- if (link_ready(helper)) roundtrip(tool, line) else oneshot(helper, tool, line)
    resp <- jsonlite::fromJSON(answer, simplifyVector = TRUE)
    if (!is.null(resp$error)) fail(resp$error$kind, tool, resp$error$message)
    res <- resp$result
    if (!is.null(resp$images) && !is.null(res)) attr(res, "images") <- unlist(resp$images)
    res
  }
  # invoke checks the arguments (NULL: not given) against the input schema's
  # required and enum, then calls the tool.
  invoke <- function(tool, schema_json, keys, values) {
    schema <- jsonlite::fromJSON(schema_json, simplifyVector = FALSE)
    props <- schema$properties
    required <- unlist(schema$required)
    args <- list()
    for (i in seq_along(keys)) {
      k <- keys[[i]]
      v <- values[[i]]
      if (is.null(v)) {
        if (k %in% required) fail("invalid", tool, sprintf("%s: argument '%s' is required", tool, k))
        next
      }
      p <- props[[k]]
      if (!is.null(p$enum)) {
        ok <- length(v) == 1 && any(vapply(p$enum, function(e) !is.null(e) && (identical(e, v) || (is.numeric(e) && is.numeric(v) && isTRUE(e == v))), logical(1)))
        if (!ok) fail("invalid", tool, sprintf("%s: argument '%s' must be one of %s", tool, k, paste(vapply(p$enum, function(e) format(e), ""), collapse = ", ")))
      }
      if (is.atomic(v) && length(v) == 1 && !identical(p$type, "array")) v <- jsonlite::unbox(v)
      args[[k]] <- v
    }
    call(tool, args)
  }
