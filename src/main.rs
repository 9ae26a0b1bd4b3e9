//! The `mcpbootd` binary: parse the command line and hand over to the library.

fn main() -> std::process::ExitCode {
    mcpbootd::cli::main()
}
