import StoreBase
import StoreCLI

#if canImport(Glibc)
import Glibc
#endif

let code = CommandLineTool.main(Array(CommandLine.arguments.dropFirst()))
Trace.report()
exit(code.rawValue)
