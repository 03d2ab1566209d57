# Run by R before IRkernel starts (IRKernelCommand), so before any session
# code. IRkernel (through evaluate) returns what is drawn on a device whose
# display list is on: the device it opens for each cell has it, but one the
# code opens with dev.new() has it off, so a plot drawn there came back
# from a stateless run (whose default device writes PNG files) and not from
# a session. The default device, which dev.new() opens, is IRkernel's own
# (PNG to /dev/null; IRkernel keeps a device option that is not pdf) with
# the display list on. A device the code names itself (png("x.png"),
# pdf(NULL)) is left as the code asked: its plots go to its file.
options(device = function(filename = "/dev/null", ...) {
  grDevices::png(filename, ...)
  grDevices::dev.control(displaylist = "enable")
})
