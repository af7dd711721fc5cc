//! The sandbox's network namespace, fork-side (the holder's, with network
//! off or `allow`): the loopback brought up, and with network `allow` the
//! egress proxy's listening socket opened there, for the holder to hand to
//! the server. Nothing here allocates.

#![allow(unsafe_code)]

use std::os::fd::RawFd;

use super::syscalls::{self, errno};

/// Sets `IFF_UP` on `lo` in the new network namespace.
#[inline]
pub(super) fn loopback_up() -> bool {
    // SAFETY: socket takes integers; the fd is closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return false;
    }
    // SAFETY: `ifreq` is plain data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid `ifreq` with a NUL-terminated name.
    let mut ok = unsafe { libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) } == 0;
    if ok {
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
        // SAFETY: as above.
        ok = unsafe { libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) } == 0;
    }
    // SAFETY: opened above, closed once.
    unsafe { libc::close(sock) };
    ok
}

/// Backlog of the egress proxy's listener.
const LISTENER_BACKLOG: libc::c_int = 256;

/// A TCP socket listening on `127.0.0.1` at a free port, in this network
/// namespace; -1 on failure (errno set).
#[inline]
pub(super) fn loopback_listener() -> RawFd {
    // SAFETY: socket takes integers.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return -1;
    }
    // SAFETY: `sockaddr_in` is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
    // SAFETY: `addr` is a `sockaddr_in` passed with its size.
    let bound = unsafe {
        libc::bind(
            sock,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } == 0;
    // SAFETY: listen takes integers.
    if !bound || unsafe { libc::listen(sock, LISTENER_BACKLOG) } != 0 {
        let e = errno();
        // SAFETY: opened above, closed once.
        unsafe { libc::close(sock) };
        syscalls::set_errno(e);
        return -1;
    }
    sock
}
