// Counted subscriptions, sans I/O: which commands go out, when an operation is done, and that
// the counts never claim a subscription the server refused.
#include "redis/subscription_book.hpp"

#include <colock/redis/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using colock::redis::detail::subscription_book;
using book = subscription_book;

namespace {

std::vector<std::string> names(char const* a) {
    return std::vector<std::string>(1, a);
}

std::vector<std::string> names(char const* a, char const* b) {
    std::vector<std::string> v;
    v.emplace_back(a);
    v.emplace_back(b);
    return v;
}

// The outcome of `op` among `finished`, or nullptr.
book::finished const* finished_of(std::vector<book::finished> const& finished, book::op_id op) {
    for (auto const& f : finished)
        if (f.op == op)
            return &f;
    return nullptr;
}

// A book with its session open: the fixture of the tests that start connected.
struct open_book {
    open_book() { b.open_session(); }
    book b;
};

} // namespace

TEST_SUITE("redis.subscription_book") {

    TEST_CASE("while no session is open, changes are counted and done at once") {
        book b;
        auto [op, commands] = b.change(true, names("a", "b"));
        CHECK(commands.empty());
        auto done = b.take_finished();
        REQUIRE(done.size() == 1);
        CHECK(done[0].op == op);
        CHECK_FALSE(done[0].ec);
        CHECK(b.count("a") == 1);

        // The handshake subscribes to each counted channel with a command of its own.
        auto handshake = b.open_session();
        REQUIRE(handshake.size() == 2);
        CHECK(handshake[0].subscribe);
        CHECK(handshake[0].channels == names("a"));
        CHECK(handshake[1].channels == names("b"));
        CHECK(b.on_server("a"));
    }

    TEST_CASE_FIXTURE(
        open_book,
        "the first subscriber sends SUBSCRIBE and waits for the server; the next waits too") {
        auto [first, commands] = b.change(true, names("a"));
        REQUIRE(commands.size() == 1);
        CHECK(commands[0].channels == names("a"));
        auto [second, none] = b.change(true, names("a"));
        CHECK(none.empty()); // already on its way
        CHECK(b.take_finished().empty());
        b.on_answer(commands[0].id, false, "");
        auto done = b.take_finished();
        CHECK(done.size() == 2);
        CHECK(finished_of(done, first));
        CHECK(finished_of(done, second));
        CHECK(b.count("a") == 2);

        // Confirmed: a third subscriber needs nothing from the server.
        auto [third, nothing] = b.change(true, names("a"));
        CHECK(nothing.empty());
        CHECK(finished_of(b.take_finished(), third));
    }

    TEST_CASE_FIXTURE(
        open_book,
        "a refused SUBSCRIBE fails everyone waiting for it and takes back their counts") {
        auto [first, commands] = b.change(true, names("a"));
        auto [second, none] = b.change(true, names("a"));
        b.on_answer(commands[0].id, true, "NOPERM no");
        auto done = b.take_finished();
        REQUIRE(done.size() == 2);
        for (auto const& f : done) {
            CHECK(f.ec == colock::redis::error::server_error);
            CHECK(f.server_text == "NOPERM no");
        }
        CHECK(b.count("a") == 0);
        CHECK_FALSE(b.on_server("a"));
        CHECK(b.counted().empty());

        // Nothing believes it is subscribed: the next subscriber asks the server again.
        auto [third, again] = b.change(true, names("a"));
        CHECK(again.size() == 1);
    }

    TEST_CASE_FIXTURE(open_book, "an operation on several channels is all or nothing") {
        auto [op_a, cmd_a] = b.change(true, names("a"));
        b.on_answer(cmd_a.at(0).id, false, "");
        b.take_finished();
        auto [op, commands] = b.change(true, names("a", "forbidden"));
        REQUIRE(commands.size() == 1);
        CHECK(commands[0].channels == names("forbidden"));
        b.on_answer(commands[0].id, true, "NOPERM");
        auto done = b.take_finished();
        REQUIRE(done.size() == 1);
        CHECK(done[0].ec == colock::redis::error::server_error);
        CHECK(b.count("a") == 1); // only the earlier subscriber's
        CHECK(b.count("forbidden") == 0);
    }

    TEST_CASE_FIXTURE(
        open_book, "the last unsubscriber sends UNSUBSCRIBE; a refusal keeps the count at zero") {
        auto [s1, sub] = b.change(true, names("a"));
        b.change(true, names("a"));
        b.on_answer(sub.at(0).id, false, "");
        b.take_finished();

        auto [u1, none] = b.change(false, names("a"));
        CHECK(none.empty());
        CHECK(finished_of(b.take_finished(), u1));
        auto [u2, unsub] = b.change(false, names("a"));
        REQUIRE(unsub.size() == 1);
        CHECK_FALSE(unsub[0].subscribe);
        CHECK(b.take_finished().empty());
        b.on_answer(unsub[0].id, true, "BUSY");
        auto done = b.take_finished();
        REQUIRE(done.size() == 1);
        CHECK(done[0].ec == colock::redis::error::server_error);
        CHECK(b.count("a") == 0);
        // The server still has it: a new subscriber needs no command.
        CHECK(b.on_server("a"));
        auto [s3, nothing] = b.change(true, names("a"));
        CHECK(nothing.empty());
    }

    TEST_CASE_FIXTURE(open_book, "unsubscribing what is not counted does nothing") {
        auto [op, commands] = b.change(false, names("never"));
        CHECK(commands.empty());
        CHECK(finished_of(b.take_finished(), op));
        CHECK(b.count("never") == 0);
    }

    TEST_CASE("commands never outlive their session: the next handshake starts from the counts") {
        book b;
        b.change(true, names("a"));
        auto handshake = b.open_session();
        b.on_answer(handshake.at(0).id, false, "");
        // An UNSUBSCRIBE goes out, and the session dies before its answer.
        auto [u, unsub] = b.change(false, names("a"));
        REQUIRE(unsub.size() == 1);
        b.close_session();
        CHECK(finished_of(b.take_finished(), u)); // done: there is no server subscription any more
        // Subscribed again while disconnected: done at once.
        auto [s, none] = b.change(true, names("a"));
        CHECK(none.empty());
        CHECK(finished_of(b.take_finished(), s));
        // A late answer for the dead session's command changes nothing.
        b.on_answer(unsub[0].id, false, "");
        auto next = b.open_session();
        REQUIRE(next.size() == 1);
        CHECK(next[0].channels == names("a"));
        CHECK(b.count("a") == 1);
    }

    TEST_CASE("changes during a handshake wait for it, and go out after it") {
        book b;
        b.change(true, names("a"));
        auto handshake = b.open_session();
        auto [more, none] = b.change(true, names("a"));
        CHECK(none.empty());
        auto [gone, unsub] = b.change(false, names("a"));
        CHECK(unsub.empty()); // one subscriber is left
        CHECK(finished_of(b.take_finished(), gone));
        b.on_answer(handshake.at(0).id, false, "");
        CHECK(finished_of(b.take_finished(), more));
    }

    TEST_CASE("a SUBSCRIBE refused in the handshake: the counts of earlier subscribers stay") {
        book b;
        b.change(true, names("kept", "revoked"));
        b.change(true, names("revoked"));
        b.take_finished();
        auto handshake = b.open_session();
        REQUIRE(handshake.size() == 2);
        auto [waiting, none] = b.change(true, names("revoked"));
        CHECK(none.empty());
        b.on_answer(handshake[0].id, false, "");
        b.on_answer(handshake[1].id, true, "NOPERM");
        CHECK(b.count("kept") == 1);
        // The two subscribers told of success while disconnected will still unsubscribe; the
        // one that waited for the handshake is told of the refusal and counts nothing.
        CHECK(b.count("revoked") == 2);
        CHECK_FALSE(b.on_server("revoked"));
        auto done = b.take_finished();
        REQUIRE(done.size() == 1);
        CHECK(done[0].op == waiting);
        CHECK(done[0].ec == colock::redis::error::server_error);
        CHECK(b.take_commands().empty());
    }

    TEST_CASE("after a handshake refusal, an earlier subscriber's unsubscribe keeps a newer one") {
        book b;
        b.change(true, names("a")); // told of success while disconnected
        b.take_finished();
        auto handshake = b.open_session();
        b.on_answer(handshake.at(0).id, true, "NOPERM");
        CHECK_FALSE(b.on_server("a"));
        // A newer subscriber, once the server allows the channel again.
        auto [newer, sub] = b.change(true, names("a"));
        REQUIRE(sub.size() == 1);
        CHECK(sub[0].subscribe);
        b.on_answer(sub[0].id, false, "");
        auto const subscribed = b.take_finished();
        auto const* ok = finished_of(subscribed, newer);
        REQUIRE(ok);
        CHECK_FALSE(ok->ec);
        CHECK(b.on_server("a"));
        // The earlier subscriber lets go: the newer one keeps its subscription.
        auto [gone, unsub] = b.change(false, names("a"));
        CHECK(unsub.empty());
        CHECK(finished_of(b.take_finished(), gone));
        CHECK(b.count("a") == 1);
        CHECK(b.on_server("a"));
        // The newer one lets go: now the server hears of it.
        auto [last, unsub2] = b.change(false, names("a"));
        REQUIRE(unsub2.size() == 1);
        CHECK_FALSE(unsub2[0].subscribe);
        CHECK(b.count("a") == 0);
    }

    TEST_CASE("a refused channel keeps its count down to zero without UNSUBSCRIBE") {
        book b;
        b.change(true, names("a"));
        b.take_finished();
        auto handshake = b.open_session();
        b.on_answer(handshake.at(0).id, true, "NOPERM");
        auto [gone, unsub] = b.change(false, names("a"));
        CHECK(unsub.empty()); // the server never had it
        CHECK(finished_of(b.take_finished(), gone));
        CHECK(b.counted().empty());
        CHECK(b.take_commands().empty());
    }

    TEST_CASE("a subscribe rolled back while a channel of it stays on the server unsubscribes it") {
        // [a, b] waits for the first handshake, which subscribes to each apart: a refused, b
        // accepted. The operation fails and takes both back; the server must not keep b.
        book b;
        auto [op, none] = b.change(true, names("a", "b"), true);
        CHECK(none.empty());
        auto handshake = b.open_session();
        REQUIRE(handshake.size() == 2);
        b.on_answer(handshake[0].id, true, "NOPERM");
        b.on_answer(handshake[1].id, false, "");
        auto const rolled_back = b.take_finished();
        auto const* failed = finished_of(rolled_back, op);
        REQUIRE(failed);
        CHECK(failed->ec == colock::redis::error::server_error);
        CHECK(b.count("a") == 0);
        CHECK(b.count("b") == 0);
        auto unsub = b.take_commands();
        REQUIRE(unsub.size() == 1);
        CHECK_FALSE(unsub[0].subscribe);
        CHECK(unsub[0].channels == names("b"));
        CHECK_FALSE(b.on_server("b"));
        b.on_answer(unsub[0].id, false, "");
        CHECK(b.take_finished().empty()); // nobody waited for it
        CHECK(b.counted().empty());
        CHECK_FALSE(b.on_server("b"));
    }

    TEST_CASE_FIXTURE(open_book,
                      "a rolled-back channel another subscriber still counts stays subscribed") {
        auto [first, sub] = b.change(true, names("b"));
        REQUIRE(sub.size() == 1);
        // [a, b]: a goes out now; b rides on the SUBSCRIBE already on its way.
        auto [op, sub_a] = b.change(true, names("a", "b"));
        REQUIRE(sub_a.size() == 1);
        b.on_answer(sub[0].id, false, "");
        b.on_answer(sub_a[0].id, true, "NOPERM");
        auto done = b.take_finished();
        REQUIRE(finished_of(done, op));
        CHECK(finished_of(done, op)->ec == colock::redis::error::server_error);
        CHECK(b.count("b") == 1);
        CHECK(b.on_server("b"));
        CHECK(b.take_commands().empty());
    }

    TEST_CASE("waiting for a session: for its handshake, or failing with the connect error") {
        book b;
        auto [op, none] = b.change(true, names("a"), true);
        CHECK(none.empty());
        CHECK(b.take_finished().empty());
        auto handshake = b.open_session();
        REQUIRE(handshake.size() == 1);
        CHECK(b.take_finished().empty());
        b.on_answer(handshake[0].id, false, "");
        CHECK(finished_of(b.take_finished(), op));
        b.close_session();

        book c;
        auto [op2, none2] = c.change(true, names("a"), true);
        auto const refused = make_error_code(boost::system::errc::connection_refused);
        c.abandon_waiting(refused);
        auto done = c.take_finished();
        REQUIRE(done.size() == 1);
        CHECK(done[0].ec == refused);
        CHECK(c.count("a") == 0);
    }

    TEST_CASE_FIXTURE(open_book,
                      "close_session with an error fails the waiting operations and takes back") {
        auto [op, commands] = b.change(true, names("a"));
        b.close_session(colock::redis::error::closed);
        auto done = b.take_finished();
        REQUIRE(done.size() == 1);
        CHECK(done[0].ec == colock::redis::error::closed);
        CHECK(b.count("a") == 0);
    }

} // TEST_SUITE
