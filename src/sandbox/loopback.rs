//! The loopback of a new network namespace, which starts down: up, so
//! that a command's test server on 127.0.0.1 works inside the agent.

use super::SetupError;
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

pub fn bring_up() -> Result<(), SetupError> {
    let fail = |what: &str, e: Errno| {
        SetupError::call(format!("cannot bring up the loopback ({what})"))(e)
    };
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| fail("socket", e))?;
    // SAFETY: ifreq is plain data, zero is a valid value of every field.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write the ifreq,
    // which lives across both calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) < 0 {
            return Err(fail("SIOCGIFFLAGS", Errno::last()));
        }
        let up = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        request.ifr_ifru.ifru_flags |= up;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &request) < 0 {
            return Err(fail("SIOCSIFFLAGS", Errno::last()));
        }
    }
    Ok(())
}
