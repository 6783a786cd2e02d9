//! Integration tests: the real binaries, run as child processes.
