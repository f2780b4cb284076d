// Package accounts maps dashgate users to the Unix accounts their children
// run as (--unix-users, issue 25): the account's uid, gid, full group list,
// home and login shell, from the password and group databases through NSS.
//
// A [Map] is made once by [New] and is safe for concurrent use; it owns no
// process or file after New returns (Lookup runs id(1) and getent(1) and
// waits for them, bounded by a timeout). It imports nothing of the project.
//
// Trust. A Map says who a dashgate user becomes; it never decides whether
// the user is who they claim (that is the users package's job). Refusals
// ([RefusedError], matched by [ErrRefused]) are for the person: their
// Error text is shown in the chat and in the 403 of /ws/pty.
package accounts
