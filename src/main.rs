// The static (musl) release builds use mimalloc: musl's own allocator made validating a
// 10,000-node config 1.4x slower than glibc's, mostly in system time (docs/decisions.md).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(keadm_batch::main_with_args(std::env::args_os()));
}
