# MCP-Forge stateless R runner. Runs <in>/code.R top-level expression by
# expression, like Rscript: visible values are printed, except the last one,
# which is returned (as text, and as JSON when it is a simple vector or
# list). Errors report the R message and the failing line of the user's code.
# A JSON envelope goes to <meta>/result.json; plots go to <out> as PNG.
local({
  IN <- Sys.getenv("FORGE_IN", "/forge/in")
  META <- Sys.getenv("FORGE_META", "/forge/meta")
  OUT <- Sys.getenv("FORGE_OUT", "/forge/out")
  REPR_CAP <- 65536L
  options(device = function(...) grDevices::png(filename = file.path(OUT, "plot_%03d.png"), width = 800, height = 600, ...))
  options(warn = 1)

  result <- list(exit_code = 0L)
  write_result <- function() {
    writeLines(as.character(jsonlite::toJSON(result, auto_unbox = TRUE, null = "null", digits = NA)), file.path(META, "result.json"))
  }
  cap <- function(s) if (nchar(s) > REPR_CAP) paste0(substr(s, 1, REPR_CAP), "... [", nchar(s), " characters]") else s

  src <- readLines(file.path(IN, "code.R"), warn = FALSE, encoding = "UTF-8")
  srcfile <- srcfilecopy("<code>", src)
  exprs <- tryCatch(parse(text = src, keep.source = TRUE, srcfile = srcfile), error = function(e) e)
  if (inherits(exprs, "error")) {
    msg <- conditionMessage(exprs)
    m <- regmatches(msg, regexec("<code>:([0-9]+):([0-9]+)", msg))[[1]]
    line <- if (length(m) == 3) as.integer(m[2]) else 0L
    col <- if (length(m) == 3) as.integer(m[3]) else 0L
    result$error <- list(name = "SyntaxError", message = msg, line = line, column = col, traceback = list(msg))
    cat("Error: ", msg, "\n", sep = "", file = stderr())
    result$exit_code <- 1L
    write_result()
    quit(save = "no", status = 1L)
  }
  refs <- attr(exprs, "srcref")
  n <- length(exprs)
  failed <- NULL
  value <- NULL
  visible <- FALSE
  for (i in seq_len(n)) {
    top_line <- refs[[i]][1]
    r <- tryCatch(
      withCallingHandlers(
        withVisible(eval(exprs[[i]], globalenv())),
        error = function(e) {
          calls <- sys.calls()
          lines <- vapply(calls, function(cl) {
            sr <- attr(cl, "srcref")
            if (!is.null(sr) && identical(attr(sr, "srcfile")$filename, "<code>")) sr[1] else NA_integer_
          }, integer(1))
          start <- max(c(0L, which(vapply(calls, function(cl) identical(cl[[1]], quote(eval)), logical(1)))))
          frames <- if (start < length(calls)) calls[(start + 1):length(calls)] else list()
          frames <- Filter(function(cl) !(is.name(cl[[1]]) && as.character(cl[[1]]) %in% c(".handleSimpleError", "h", "stop")), frames)
          tb <- vapply(frames, function(cl) paste(deparse(cl, nlines = 1L), collapse = ""), character(1))
          known <- lines[!is.na(lines)]
          failed <<- list(
            name = class(e)[1], message = conditionMessage(e),
            line = if (length(known)) as.integer(known[length(known)]) else as.integer(top_line),
            column = 0L, traceback = as.list(tb)
          )
        }
      ),
      error = function(e) NULL
    )
    if (!is.null(failed)) break
    if (i < n) {
      if (r$visible) print(r$value)
    } else {
      value <- r$value
      visible <- r$visible
    }
  }
  if (!is.null(failed)) {
    cat("Error", if (failed$line > 0) paste0(" (line ", failed$line, ")") else "", ": ", failed$message, "\n", sep = "", file = stderr())
    result$error <- failed
    result$exit_code <- 1L
  } else if (visible && !is.null(value)) {
    result$repr <- cap(paste(utils::capture.output(print(value)), collapse = "\n"))
    simple <- (is.atomic(value) && is.null(dim(value)) && length(value) <= 10000L) || (is.list(value) && !is.data.frame(value))
    j <- if (simple) tryCatch(as.character(jsonlite::toJSON(if (is.factor(value)) as.character(value) else value, auto_unbox = TRUE, null = "null", na = "null", digits = NA)), error = function(e) NULL) else NULL
    if (!is.null(j) && nchar(j) <= REPR_CAP) result$json <- j else result$is_repr <- TRUE
  }
  invisible(grDevices::graphics.off())
  write_result()
  quit(save = "no", status = result$exit_code)
})
