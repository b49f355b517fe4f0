import StoreBase
import StoreCLI

#if canImport(Glibc)
import Glibc

// A file-size limit (`ulimit -f`) must make write() fail with EFBIG, which storectl reports as an I/O error,
// rather than kill the process with SIGXFSZ halfway through a write.
signal(SIGXFSZ, SIG_IGN)
#endif

let code = CommandLineTool.main(Array(CommandLine.arguments.dropFirst()))
// Only when asked for: reading the setting through Trace would start ProcessInfo in every process.
if getenv("STORECTL_TRACE") != nil { Trace.report() }
exit(code.rawValue)
