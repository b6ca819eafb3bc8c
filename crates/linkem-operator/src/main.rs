fn main() -> std::process::ExitCode {
    linkem_operator::cli::main()
}
