//! Attacks on network. The network with `network = off`.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.

use crate::Attack;
use crate::lab::*;
use std::time::Duration;

/// The escape suite's attacks on network.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "TCP to a host loopback server",
        expect: "no connection accepted",
        control: None,
        run: tcp_to_host_loopback,
    },
    Attack {
        name: "UDP to a host loopback socket",
        expect: "no datagram received",
        control: None,
        run: udp_to_host_loopback,
    },
    Attack {
        name: "DNS lookup",
        expect: "no name resolved",
        control: None,
        run: dns_lookup,
    },
    Attack {
        name: "raw, packet, IPv6 and netlink sockets",
        expect: "no socket opened",
        control: None,
        run: raw_and_packet_sockets,
    },
    Attack {
        name: "connect to a host abstract unix socket",
        expect: "no connection accepted",
        control: None,
        run: abstract_unix_socket_of_host,
    },
];

fn tcp_to_host_loopback(l: &Lab) -> Verdict {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    l.sh(&format!(
        "echo hi > /dev/tcp/127.0.0.1/{port}; {}",
        py(&format!(
            "import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)"
        ))
    ));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host listener saw {other:?}")),
    }
}

fn udp_to_host_loopback(l: &Lab) -> Verdict {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let port = sock.local_addr().unwrap().port();
    l.sh(&format!(
        "echo hi > /dev/udp/127.0.0.1/{port}; {}",
        py(&format!(
            "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"127.0.0.1\", {port}))"
        ))
    ));
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = [0u8; 16];
    match sock.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host socket received {other:?}")),
    }
}

fn dns_lookup(l: &Lab) -> Verdict {
    let out = l.sh(&format!(
        "getent hosts localhost.localdomain.invalid example.com; {}; echo rc=$?",
        py("import socket; print(\"RESOLVED\", socket.getaddrinfo(\"example.com\", 80))")
    ));
    not_in(&out, "RESOLVED")
}

fn raw_and_packet_sockets(l: &Lab) -> Verdict {
    let out = l.sh(&py(
        "import socket\nfor f, t in ((socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET6, socket.SOCK_DGRAM), (socket.AF_NETLINK, socket.SOCK_RAW)):\n  try:\n    socket.socket(f, t, 1 if t == socket.SOCK_RAW and f == socket.AF_INET else 0); print(\"OPENED\", f)\n  except OSError as e: print(\"refused\", f, e.errno)",
    ));
    not_in(&out, "OPENED")
}

fn abstract_unix_socket_of_host(l: &Lab) -> Verdict {
    use std::os::linux::net::SocketAddrExt;
    let name = marker("abstract");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    l.sh(&py(&format!(
        "import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\")"
    )));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host socket accepted {other:?}")),
    }
}
