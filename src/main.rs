fn main() {
    std::process::exit(keadm_batch::main_with_args(std::env::args_os()));
}
