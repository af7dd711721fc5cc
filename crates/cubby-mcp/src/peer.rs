//! Who is on the other end of a loopback TCP connection: the uid that owns
//! the client's socket, read from the kernel's socket tables
//! (`/proc/net/tcp`, `/proc/net/tcp6`), where the client's end is the row
//! whose local address is the peer's and whose remote address is ours.
//!
//! `cubby serve` on loopback without a token lets in only connections of
//! the user it runs as (red-team pass 3, R3-3: any local user could drive a
//! server of root's). A row that cannot be found — the client already gone,
//! a table that cannot be read — is no one's: the connection is refused.

use std::net::{IpAddr, SocketAddr};

/// The state column of a socket in TIME_WAIT.
const TIME_WAIT: &str = "06";

/// The kernel's socket tables: IPv4, IPv6 (whose addresses are 128-bit).
const TCP_TABLES: [(&str, bool); 2] = [("/proc/net/tcp", false), ("/proc/net/tcp6", true)];

/// The uid owning the socket at `peer` connected to `local`, both on this
/// machine (in this network namespace).
pub(crate) fn uid_of_peer(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    TCP_TABLES.iter().find_map(|&(table, v6)| {
        let text = std::fs::read_to_string(table).ok()?;
        uid_in_table(&text, v6, peer, local)
    })
}

/// An address as the tables spell it: the IP as 32-bit words in host byte
/// order, each as 8 hex digits, then `:` and the port as 4 hex digits. An
/// IPv4 address in the IPv6 table is mapped (`::ffff:a.b.c.d`).
fn spelled(addr: SocketAddr, v6_table: bool) -> String {
    let words: Vec<[u8; 4]> = match (addr.ip(), v6_table) {
        (IpAddr::V4(ip), false) => vec![ip.octets()],
        (IpAddr::V4(ip), true) => {
            let o = ip.to_ipv6_mapped().octets();
            o.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect()
        }
        (IpAddr::V6(ip), _) => ip
            .octets()
            .chunks(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut out = String::new();
    for w in words {
        out.push_str(&format!("{:08X}", u32::from_ne_bytes(w)));
    }
    out.push_str(&format!(":{:04X}", addr.port()));
    out
}

/// The uid of the row of `table` (the text of one socket table, `v6` for
/// the IPv6 one) whose local address is `peer` and remote address `local`.
fn uid_in_table(table: &str, v6: bool, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (want_local, want_remote) = (spelled(peer, v6), spelled(local, v6));
    // The first line names the columns.
    for row in table.lines().skip(1) {
        let fields: Vec<&str> = row.split_whitespace().collect();
        // sl, local, remote, st, queues, timer, retransmits, uid, timeout,
        // inode, …
        if fields.len() > 9
            && fields[1].eq_ignore_ascii_case(&want_local)
            && fields[2].eq_ignore_ascii_case(&want_remote)
        {
            // A socket its process has closed (TIME_WAIT, or orphaned: no
            // inode) shows uid 0: it is no one's, not root's.
            if fields[3] == TIME_WAIT || fields[9] == "0" {
                return None;
            }
            return fields[7].parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:A2C4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 20 4 30 10 -1\n\
   2: 0100007F:1F90 0100007F:A2C4 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1\n";

    const V6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n\
   1: 00000000000000000000000001000000:B00B 00000000000000000000000001000000:1F90 01 00000000:00000000 00:00000000 00000000    65534        0 2 1 0000000000000000 20 4 30 10 -1\n";

    #[test]
    fn the_clients_row_gives_its_uid() {
        let server: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:41668".parse().unwrap();
        assert_eq!(uid_in_table(V4, false, client, server), Some(1000));
        // The server's own end of the same connection is another row.
        assert_eq!(uid_in_table(V4, false, server, client), Some(0));
        let other: SocketAddr = "127.0.0.1:41669".parse().unwrap();
        assert_eq!(uid_in_table(V4, false, other, server), None);
    }

    #[test]
    fn a_closed_clients_row_is_no_ones() {
        let server: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:41700".parse().unwrap();
        let time_wait = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:A2E4 0100007F:1F90 06 00000000:00000000 03:00000F4C 00000000     0        0 0 3 0000000000000000\n";
        assert_eq!(uid_in_table(time_wait, false, client, server), None);
        let orphaned = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:A2E4 0100007F:1F90 05 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1\n";
        assert_eq!(uid_in_table(orphaned, false, client, server), None);
    }

    #[test]
    fn ipv6_rows_are_read_too() {
        let server: SocketAddr = "[::1]:8080".parse().unwrap();
        let client: SocketAddr = "[::1]:45067".parse().unwrap();
        assert_eq!(uid_in_table(V6, true, client, server), Some(65534));
        assert_eq!(uid_in_table(V4, false, client, server), None);
    }

    #[test]
    fn a_live_connection_of_this_process_is_ours() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        assert_eq!(
            uid_of_peer(peer, server),
            Some(rustix::process::geteuid().as_raw())
        );
    }
}
