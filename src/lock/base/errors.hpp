// How the lock layer sorts the errors an attempt, a renewal or a release can end with.
// Private to the library's sources.
#pragma once

#include <colock/lock_options.hpp>

#include <boost/system/error_code.hpp>

#include <string>
#include <string_view>

namespace colock::detail {

// Throws system_error(error::invalid_argument) for a locker's key prefix that would split a
// lock's keys over Cluster slots (its first '{' closed at once: an empty hash tag).
void validate_key_prefix(std::string_view prefix);

// Errors after which a waiting co_lock, a renewal or a release tries again (within its
// deadline): the connection was lost or is being re-established, or the server refused for
// a passing reason. A connection that never worked, or was closed, is a real error.
bool is_transient(boost::system::error_code ec, std::string_view server_text = {});

// A connection that has never been established reports why to the requests it was started
// for (refused, unreachable, timed out, TLS, the handshake); once it has worked, it keeps
// requests queued across a loss and reconnects by itself, so these reach no request then.
bool is_connect_failure(boost::system::error_code ec);

// Connect failures that trying again cannot mend: the server refused the handshake (wrong
// password, unknown database, HELLO not permitted) or the TLS peer failed verification.
bool is_lasting_connect_failure(boost::system::error_code ec);

// The text of an attempt's failure `ec`: the server's text for its errors; for a connection that
// could not be established, the connection's account of why (`last_error`: endpoint and cause),
// which the bare code lacks, and for a waiting call (`waited`) how long it tried.
std::string attempt_failure_text(boost::system::error_code ec, std::string const& server_text,
                                 lock_options const& opt, bool waited,
                                 std::string const& last_error);

// `text` (a failure's), and when it is the server's ACL refusal (NOPERM, or a script's "The user
// executing the script can't ..."), where the list of what a `kind` ("lock", "semaphore",
// "election") needs is: Redis does not say which command a script was refused.
std::string with_acl_pointer(std::string text, std::string_view kind);

// The text of a wait that ran out (opt.wait_timeout), naming the connection when it is what
// kept the call waiting (`connected` false; `last_error` its account).
std::string wait_timeout_text(lock_options const& opt, bool connected,
                              std::string const& last_error);

} // namespace colock::detail
