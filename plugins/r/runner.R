# MCP-Forge stateless R runner. Runs <in>/code.R top-level expression by
# expression, like Rscript: visible values are printed, except the last one,
# which is returned (as text, and as JSON when it is a simple vector or
# list). Errors report the R message and the failing line of the user's code.
# A JSON envelope goes to <meta>/result.json; plots go to <out> as PNG.
#
# Resident mode (FORGE_CHAN set, see sdk/oneshot "The resident runner"): the
# runner starts, loads jsonlite, then listens on the unix socket
# <chan>/runner.sock, accepts ONE connection, reads one request line
# ({"code": ..., "max_output": N}), runs it exactly as above, writes the
# envelope as one line on the same connection and quits. R has no unix
# sockets, so a relay in perl (which the image has: it is in Debian's
# base) holds the socket and passes the request and the envelope through
# two FIFOs in <chan> that only this container uses. Its stdout and stderr
# are files (<meta>/stdout, stderr) that the container's command opened for
# appending; they are emptied when the request arrives.
local({
  IN <- Sys.getenv("FORGE_IN", "/forge/in")
  META <- Sys.getenv("FORGE_META", "/forge/meta")
  OUT <- Sys.getenv("FORGE_OUT", "/forge/out")
  REPR_CAP <- 65536L
  options(device = function(...) grDevices::png(filename = file.path(OUT, "plot_%03d.png"), width = 800, height = 600, ...))
  options(warn = 1)

  CHAN <- Sys.getenv("FORGE_CHAN", "")
  # The relay: listen on the socket (ARGV[0], 0666: the host connects as
  # another user), fork and let the parent exit 0 once it accepts. The child
  # opens the FIFOs (run, ARGV[1], meeting R's open; done, ARGV[2], which R
  # holds open) before the run, so that a run costs no open; then it accepts
  # ONE connection (the socket goes, so later ones find nothing), passes
  # the request line to run and the envelope line from done back, waits
  # for the host to close its end (at most 10 s) and removes done, which R
  # waits for before it quits. An R that dies closes done's last writer:
  # the relay reads EOF and closes the connection.
  RELAY <- paste(
    "use Socket; my ($path, $run, $done) = @ARGV;",
    "socket(my $l, AF_UNIX, SOCK_STREAM, 0) or exit 70; bind($l, pack_sockaddr_un($path)) or exit 70;",
    "chmod(0666, $path) or exit 70; listen($l, 1) or exit 70;",
    "my $pid = fork(); exit 70 unless defined $pid; exit 0 if $pid;",
    "open(my $r, \">\", $run) or exit 1; open(my $d, \"<\", $done) or exit 1;",
    "accept(my $c, $l) or exit 1; close($l); unlink($path);",
    "my $req = <$c>; exit 1 unless defined $req; print $r $req; close($r);",
    "my $env = <$d>; if (defined $env) { select($c); $| = 1; print $c $env; shutdown($c, 1);",
    "eval { local $SIG{ALRM} = sub { die }; alarm 10; my $x; 1 while sysread($c, $x, 65536); alarm 0; }; } close($c); unlink($done);"
  )
  CAP <- as.numeric(Sys.getenv("FORGE_MAX_OUTPUT", "1048576"))
  MAX_IMAGE <- 0 # resident mode: images up to this size may go in the answer
  INLINE_BUDGET <- 1048576 # what the answer carries besides the envelope (sdk/oneshot inlineAnswer)
  code <- NULL
  if (nzchar(CHAN)) {
    loadNamespace("jsonlite")
    # First calls load and compile lazily (about 20 ms): pay it before ready.
    invisible(jsonlite::fromJSON('{"code": "1", "max_output": 1}'))
    invisible(jsonlite::toJSON(list(exit_code = 0L, repr = "x", json = "1", stdout_bytes = 0), auto_unbox = TRUE, null = "null", digits = NA))
    invisible(jsonlite::toJSON(1:2, auto_unbox = TRUE, null = "null", na = "null", digits = NA))
    invisible(parse(text = "1", keep.source = TRUE, srcfile = srcfilecopy("<warm>", "1")))
    invisible(utils::capture.output(print(1)))
    done <- file.path(CHAN, "done")
    run <- file.path(CHAN, "run")
    if (!nzchar(Sys.which("perl"))) {
      cat("the resident R runner needs perl in the image (Debian's perl-base) for its socket\n", file = stderr())
      quit(save = "no", status = 70L)
    }
    if (system2("mkfifo", c("-m", "600", shQuote(done), shQuote(run))) != 0L) quit(save = "no", status = 70L)
    # Read-write: the open does not wait for the relay, which reads one line.
    out <- fifo(done, open = "w+", blocking = TRUE)
    # The relay listens, then its parent exits: 0 means the socket accepts
    # ("ready"), anything else ends the runner before it was ready.
    if (system2("perl", c("-e", shQuote(RELAY), shQuote(file.path(CHAN, "runner.sock")), shQuote(run), shQuote(done))) != 0L) quit(save = "no", status = 70L)
    con <- fifo(run, open = "rb", blocking = TRUE) # meets the relay's open; reads wait for the request
    chunks <- list()
    repeat { # a FIFO read returns what is there: read to the end
      b <- readBin(con, "raw", 65536L)
      if (!length(b)) break
      chunks[[length(chunks) + 1L]] <- b
    }
    close(con)
    req <- jsonlite::fromJSON(rawToChar(do.call(c, chunks)))
    unlink(run)
    code <- req$code
    Encoding(code) <- "UTF-8"
    if (!is.null(req$max_output) && req$max_output > 0) CAP <- req$max_output
    if (!is.null(req$max_image) && req$max_image > 0) MAX_IMAGE <- req$max_image
    # Forget what start-up printed: the program's output starts here.
    for (s in c("stdout", "stderr")) close(file(file.path(META, s), "w"))
  }

  # The program's output and the images it left, for the answer (sdk/oneshot
  # "inlined"): the host then reads no file, which on Kubernetes is a round
  # trip through the API server each. Within INLINE_BUDGET in all; a part
  # that does not fit is left out and the host reads its files. An image
  # over MAX_IMAGE is listed without data, as the host's read would skip
  # it. Links and empty files are passed over (R cannot tell a FIFO from a
  # file, and a FIFO is empty: reading one would wait).
  inlined <- function() {
    b64 <- function(x) gsub("\n", "", jsonlite::base64_enc(x), fixed = TRUE) # it breaks lines
    budget <- INLINE_BUDGET
    out <- list()
    for (s in c("stdout", "stderr")) {
      p <- file.path(META, s)
      size <- file.size(p)
      if (is.na(size) || size > budget || nzchar(Sys.readlink(p))) return(NULL)
      data <- if (size > 0) readBin(p, "raw", size) else raw(0)
      if (length(data) != size) return(NULL)
      budget <- budget - size
      out[[s]] <- b64(data)
    }
    inl <- list(output = out)
    if (MAX_IMAGE <= 0) return(inl)
    files <- list()
    for (name in sort(list.files(OUT, all.files = TRUE, no.. = TRUE), method = "radix")) {
      if (!grepl("[.](png|jpe?g|svg|gif)$", tolower(name))) next
      p <- file.path(OUT, name)
      info <- file.info(p)
      if (is.na(info$size) || info$isdir || nzchar(Sys.readlink(p)) || info$size == 0) next
      if (length(files) >= 256L) return(inl) # sdk/oneshot maxInlineFiles
      if (info$size > MAX_IMAGE) {
        files[[length(files) + 1L]] <- list(name = name, size = info$size)
        next
      }
      if (info$size > budget) return(inl)
      data <- readBin(p, "raw", info$size)
      if (length(data) != info$size) return(inl)
      budget <- budget - info$size
      files[[length(files) + 1L]] <- list(name = name, size = info$size, data = b64(data))
    }
    inl$files <- files
    inl
  }

  result <- list(exit_code = 0L)
  write_result <- function() {
    if (!nzchar(CHAN)) {
      writeLines(as.character(jsonlite::toJSON(result, auto_unbox = TRUE, null = "null", digits = NA)), file.path(META, "result.json"))
      return(invisible())
    }
    flush(stdout())
    flush(stderr())
    # What the program printed is counted here and cut to the cap, so the
    # host can read the files whole.
    for (s in c("stdout", "stderr")) {
      p <- file.path(META, s)
      size <- file.size(p)
      if (!is.na(size)) {
        result[[paste0(s, "_bytes")]] <<- size
        if (size > CAP) writeBin(readBin(p, "raw", CAP), p)
      }
    }
    inl <- tryCatch(inlined(), error = function(e) NULL)
    if (!is.null(inl)) result$inline <<- inl
    writeLines(as.character(jsonlite::toJSON(result, auto_unbox = TRUE, null = "null", digits = NA)), out)
    close(out)
    # Quit only once the relay is done (it removes done once the host has
    # the answer): under gVisor the relay that carries it to the host is a
    # process of this sandbox, which ends with R.
    t0 <- Sys.time()
    while (file.exists(done) && difftime(Sys.time(), t0, units = "secs") < 10) Sys.sleep(0.002)
  }
  cap <- function(s) if (nchar(s) > REPR_CAP) paste0(substr(s, 1, REPR_CAP), "... [", nchar(s), " characters]") else s

  src <- if (is.null(code)) {
    readLines(file.path(IN, "code.R"), warn = FALSE, encoding = "UTF-8")
  } else {
    strsplit(code, "\r\n|\n|\r")[[1]]
  }
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
