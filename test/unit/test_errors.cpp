// How the lock layer sorts and words its errors (base/errors): which codes are passing, which
// are a connection never made and which of those trying again cannot mend; the texts of an
// attempt's failure, of a wait that ran out and of an ACL refusal; the lock category's names.
#include "lock/base/errors.hpp"

#include "category_messages.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace std::chrono_literals;
using boost::system::error_code;
using colock::lock_options;
// What is under test, from base/errors.hpp.
using colock::detail::attempt_failure_text, colock::detail::is_connect_failure,
    colock::detail::is_lasting_connect_failure, colock::detail::is_transient,
    colock::detail::wait_timeout_text, colock::detail::with_acl_pointer;
namespace redis = colock::redis;

namespace {

error_code const conn_refused = boost::asio::error::connection_refused;
error_code const not_found = boost::asio::error::host_not_found;
error_code const eof = boost::asio::error::eof;
// A TLS stream cut short, and an OpenSSL error (a certificate that failed verification).
error_code const truncated = boost::asio::ssl::error::stream_truncated;
error_code const tls(0x0A000086, boost::asio::error::get_ssl_category());

bool has_text(std::string const& s, std::string const& part) {
    return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("errors: lost connections, missed health checks and a missing quorum are passing") {
    CHECK(is_transient(redis::error::connection_lost));
    CHECK(is_transient(redis::error::health_check_timeout));
    CHECK(is_transient(colock::error::no_quorum));
}

TEST_CASE("errors: a server error is passing by its text's first word only") {
    CHECK(is_transient(redis::error::server_error, "LOADING Redis is loading"));
    CHECK(is_transient(redis::error::server_error, "TRYAGAIN later"));
    CHECK_FALSE(is_transient(redis::error::server_error, "NOPERM no"));
    CHECK_FALSE(is_transient(redis::error::server_error, ""));
    // The text counts only beside a server error.
    CHECK_FALSE(is_transient(redis::error::unexpected_reply, "LOADING"));
}

TEST_CASE("errors: a connection never made, closed by its user, or a lock error is not passing") {
    for (error_code ec :
         {conn_refused, not_found, eof, tls, truncated, error_code(redis::error::connect_timeout),
          error_code(redis::error::handshake_failed), error_code(redis::error::closed),
          error_code(colock::error::timeout), error_code(colock::error::unexpected_reply),
          error_code(boost::asio::error::operation_aborted), error_code()}) {
        CAPTURE(ec.message());
        CHECK_FALSE(is_transient(ec));
    }
}

TEST_CASE("errors: system, resolver, end-of-stream and TLS errors are failures to connect") {
    for (error_code ec :
         {conn_refused, not_found, eof, tls, truncated, error_code(boost::asio::error::timed_out),
          error_code(boost::asio::error::network_unreachable)}) {
        CAPTURE(ec.message());
        CHECK(is_connect_failure(ec));
    }
}

TEST_CASE("errors: of the connection's own codes, only a connect timeout and a refused handshake "
          "are failures to connect") {
    CHECK(is_connect_failure(redis::error::connect_timeout));
    CHECK(is_connect_failure(redis::error::handshake_failed));
    for (auto e :
         {redis::error::server_error, redis::error::connection_lost,
          redis::error::health_check_timeout, redis::error::unexpected_reply, redis::error::closed,
          redis::error::unsupported_command, redis::error::no_primary_address,
          redis::error::no_slot_map, redis::error::cross_slot, redis::error::invalid_url}) {
        CAPTURE(to_string(e));
        CHECK_FALSE(is_connect_failure(e));
    }
}

TEST_CASE("errors: no error, a cancellation and the lock's own codes are no failure to connect") {
    CHECK_FALSE(is_connect_failure(error_code()));
    CHECK_FALSE(is_connect_failure(boost::asio::error::operation_aborted));
    for (auto e : {colock::error::timeout, colock::error::lock_lost, colock::error::no_quorum,
                   colock::error::unexpected_reply, colock::error::not_held})
        CHECK_FALSE(is_connect_failure(e));
}

TEST_CASE("errors: a refused handshake and an OpenSSL failure last; a refused, slow or cut-short "
          "connect does not") {
    CHECK(is_lasting_connect_failure(redis::error::handshake_failed));
    CHECK(is_lasting_connect_failure(tls));
    CHECK_FALSE(is_lasting_connect_failure(truncated)); // the stream's, not OpenSSL's
    CHECK_FALSE(is_lasting_connect_failure(redis::error::connect_timeout));
    CHECK_FALSE(is_lasting_connect_failure(conn_refused));
    CHECK_FALSE(is_lasting_connect_failure(not_found));
    CHECK_FALSE(is_lasting_connect_failure(error_code()));
}

TEST_CASE("errors: an attempt's failure other than a connect failure reads as the server's text") {
    lock_options const opt;
    CHECK(attempt_failure_text(redis::error::server_error, "NOPERM no", opt, true, "ignored") ==
          "NOPERM no");
    CHECK(attempt_failure_text(redis::error::connection_lost, "", opt, true, "ignored").empty());
}

TEST_CASE("errors: a first attempt without a connection names the connection's account of why") {
    lock_options const opt;
    CHECK(attempt_failure_text(conn_refused, "", opt, false, "connecting to h:1 (TCP): refused") ==
          "no connection to the Redis server: connecting to h:1 (TCP): refused");
    // Without an account, the code's own message.
    CHECK(attempt_failure_text(conn_refused, "", opt, false, "") ==
          "no connection to the Redis server: " + conn_refused.message());
}

TEST_CASE("errors: a waiting call without a connection says how long it tried: the smaller of "
          "first_connect_timeout and wait_timeout") {
    lock_options opt;
    opt.first_connect_timeout = 10'000ms;
    CHECK(attempt_failure_text(conn_refused, "", opt, true, "why") ==
          "no connection to the Redis server within 10000 ms: why");
    opt.wait_timeout = 2500ms;
    CHECK(attempt_failure_text(conn_refused, "", opt, true, "why") ==
          "no connection to the Redis server within 2500 ms: why");
    opt.wait_timeout = 60'000ms;
    CHECK(attempt_failure_text(conn_refused, "", opt, true, "why") ==
          "no connection to the Redis server within 10000 ms: why");
}

TEST_CASE("errors: a waiting call that met a lasting connect failure does not speak of a budget") {
    lock_options const opt;
    CHECK(attempt_failure_text(redis::error::handshake_failed, "", opt, true, "WRONGPASS") ==
          "no connection to the Redis server: WRONGPASS");
    CHECK(attempt_failure_text(tls, "", opt, true, "certificate") ==
          "no connection to the Redis server: certificate");
}

TEST_CASE("errors: a command an ACL refuses a script points at the list of the kind's scripts' "
          "commands") {
    auto const t = with_acl_pointer(
        "ERR The user executing the script can't run this command or subcommand", "semaphore");
    CHECK(t.starts_with("ERR The user executing the script can't run this command"));
    CHECK(has_text(t, "the semaphore's scripts call"));
    CHECK(has_text(t, "docs/operations.md, \"ACL permissions\""));
}

TEST_CASE("errors: NOPERM, and a script's refusal of a key or channel, point at what the kind "
          "needs") {
    auto const noperm = with_acl_pointer("NOPERM this user has no permissions", "lock");
    CHECK(noperm == "NOPERM this user has no permissions (docs/operations.md, \"ACL "
                    "permissions\", lists what locks need)");
    auto const key = with_acl_pointer(
        "ERR The user executing the script can't access at least one of the keys", "election");
    CHECK(key.ends_with("lists what elections need)"));
}

TEST_CASE("errors: other texts, NOPERM not at the start included, are left as they are") {
    for (std::string text :
         {"", "ERR unknown command", "LOADING", "ERR mentions NOPERM later", "noperm lower case"})
        CHECK(with_acl_pointer(text, "lock") == text);
}

TEST_CASE("errors: a wait that ran out while connected names its timeout only") {
    lock_options opt;
    opt.wait_timeout = 1500ms;
    CHECK(wait_timeout_text(opt, true, "ignored") == "not acquired within 1500 ms");
}

TEST_CASE("errors: a wait that ran out without a connection says so, with its account when "
          "there is one") {
    lock_options opt;
    opt.wait_timeout = 0ms;
    CHECK(wait_timeout_text(opt, false, "") ==
          "not acquired within 0 ms; the connection to the Redis server is not established");
    CHECK(wait_timeout_text(opt, false, "connecting to h:1 (TCP): refused") ==
          "not acquired within 0 ms; the connection to the Redis server is not established: "
          "connecting to h:1 (TCP): refused");
}

TEST_CASE("errors: the lock category gives every code a message of its own, and names a code it "
          "does not know") {
    for (auto const& m : colock::test::distinct_messages(
             colock::error_category(), colock::error::timeout, colock::error::stale_fence)) {
        CHECK_FALSE(m.empty());
        CHECK_FALSE(m.starts_with("unknown"));
    }
    CHECK(colock::error_category().message(999) == "unknown colock error 999");
    CHECK(std::string(colock::error_category().name()) == "colock");
    CHECK(make_error_code(colock::error::no_quorum).category() == colock::error_category());
    CHECK(make_error_code(colock::error::replicas_not_acknowledged).message() ==
          "too few replicas acknowledged the lock in time");
}
