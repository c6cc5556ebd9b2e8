fn main() -> std::process::ExitCode {
    quill::cli::main()
}
