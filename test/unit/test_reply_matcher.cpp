// Reply matching, sans I/O: RESP3 byte streams as Redis 7 sends them, run through the parser,
// and which request gets which answer. The streams were checked against a real redis-server 7.0
// (RESP3) where the test says what the server does.
#include "redis/reply_matcher.hpp"

#include <colock/resp3/parser.hpp>
#include <colock/resp3/request.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

using colock::redis::detail::confirmation_kind;
using colock::redis::detail::reply_matcher;
using colock::resp3::reply_kind;
using colock::resp3::request;
using colock::resp3::value;

namespace {

// ---- RESP3 as the server writes it

std::string bulk(std::string_view s) {
    return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}

std::string simple_error(std::string_view s) {
    return "-" + std::string(s) + "\r\n";
}

// A confirmation: >3 kind channel count; an empty channel stands for null.
std::string confirm(std::string_view kind, std::string_view channel, int count) {
    return ">3\r\n" + bulk(kind) + (channel.empty() ? std::string("_\r\n") : bulk(channel)) + ":" +
           std::to_string(count) + "\r\n";
}

std::string message(std::string_view channel, std::string_view payload) {
    return ">3\r\n" + bulk("message") + bulk(channel) + bulk(payload);
}

std::string const noperm =
    "NOPERM this user has no permissions to access one of the channels used as arguments";

template <class... Args>
request command(std::string_view name, Args const&... args) {
    request r;
    r.push(name, args...);
    return r;
}

// Plays the connection: requests in flight in order, answers taken as they complete.
struct harness {
    reply_matcher matcher;
    colock::resp3::parser parser;
    std::deque<int> in_flight;
    std::map<int, std::vector<value>> answers; // by request number
    std::vector<int> completed;                // request numbers in completion order
    std::vector<value> pushes;                 // what the listeners saw
    int unexpected = 0;
    int next = 0;

    int add(request const& r) {
        matcher.add(r.commands(), r.shapes(), r.payload());
        in_flight.push_back(next);
        return next++;
    }

    // Feeds `bytes` in chunks of `chunk` bytes (0: all at once).
    void feed(std::string_view bytes, std::size_t chunk = 0) {
        std::string buffer;
        std::size_t pos = 0;
        while (pos < bytes.size()) {
            std::size_t const n =
                chunk == 0 ? bytes.size() - pos : std::min(chunk, bytes.size() - pos);
            buffer.append(bytes.substr(pos, n));
            pos += n;
            for (;;) {
                boost::system::error_code ec;
                std::size_t const used = parser.consume(buffer, ec);
                REQUIRE_FALSE(ec);
                buffer.erase(0, used);
                if (!parser.done())
                    break;
                on_value(parser.release());
            }
        }
        CHECK(buffer.empty());
    }

    void on_value(value v) {
        auto const route = matcher.feed(v);
        if (route == reply_matcher::route::unexpected) {
            ++unexpected;
            return;
        }
        if (route != reply_matcher::route::answer)
            pushes.push_back(v);
        while (matcher.front_done()) {
            REQUIRE_FALSE(in_flight.empty());
            answers[in_flight.front()] = matcher.take_front();
            completed.push_back(in_flight.front());
            in_flight.pop_front();
        }
        CHECK(matcher.size() == in_flight.size());
    }

    bool done(int id) const { return answers.count(id) != 0; }
    value const& answer(int id, std::size_t command = 0) const {
        return answers.at(id).at(command);
    }
};

std::string text(value const& v) {
    auto s = v.as_string();
    return s ? std::string(*s) : std::string("<not a string>");
}

bool is_confirmation(value const& v, std::string_view kind, std::string_view channel) {
    return v.type == colock::resp3::type::push && v.elements.size() == 3 &&
           v.elements[0].as_string() == kind &&
           (channel.empty() ? v.elements[1].is_null() : v.elements[1].as_string() == channel);
}

} // namespace

TEST_SUITE("redis.reply_matcher") {

    TEST_CASE("confirmation_kind names the six confirmations and nothing else") {
        colock::resp3::parser p;
        auto parse = [&p](std::string const& bytes) {
            boost::system::error_code ec;
            p.consume(bytes, ec);
            REQUIRE(p.done());
            return p.release();
        };
        CHECK(confirmation_kind(parse(confirm("subscribe", "a", 1))) == reply_kind::subscribe);
        CHECK(confirmation_kind(parse(confirm("psubscribe", "a*", 1))) == reply_kind::psubscribe);
        CHECK(confirmation_kind(parse(confirm("ssubscribe", "a", 1))) == reply_kind::ssubscribe);
        CHECK(confirmation_kind(parse(confirm("unsubscribe", "", 0))) == reply_kind::unsubscribe);
        CHECK(confirmation_kind(parse(confirm("punsubscribe", "a*", 0))) ==
              reply_kind::punsubscribe);
        CHECK(confirmation_kind(parse(confirm("sunsubscribe", "a", 0))) ==
              reply_kind::sunsubscribe);
        CHECK(confirmation_kind(parse(message("a", "hi"))) == reply_kind::ordinary);
        CHECK(confirmation_kind(parse(">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n")) ==
              reply_kind::ordinary);
        // The same words outside a push are ordinary replies.
        CHECK(confirmation_kind(parse("*3\r\n" + bulk("subscribe") + bulk("a") + ":1\r\n")) ==
              reply_kind::ordinary);
    }

    TEST_CASE("a refused SUBSCRIBE between two GETs: each request gets its own answer") {
        // Redis 7, an ACL user without channels: GET, SUBSCRIBE a b, GET.
        harness h;
        int const get1 = h.add(command("GET", "k1"));
        int const sub = h.add(command("SUBSCRIBE", "a", "b"));
        int const get2 = h.add(command("GET", "k2"));
        h.feed(bulk("v1") + simple_error(noperm) + bulk("v2"));
        CHECK(h.unexpected == 0);
        CHECK(h.completed == std::vector<int>{get1, sub, get2});
        CHECK(text(h.answer(get1)) == "v1");
        CHECK(h.answer(sub).is_error());
        CHECK(h.answer(sub).text == noperm);
        CHECK(text(h.answer(get2)) == "v2");
        CHECK(h.pushes.empty());
    }

    TEST_CASE("the same in one request: one answer per command") {
        harness h;
        request r;
        r.push("GET", "k1");
        r.push("SUBSCRIBE", "a", "b");
        r.push("GET", "k2");
        int const id = h.add(r);
        h.feed(bulk("v1") + simple_error(noperm));
        CHECK_FALSE(h.done(id));
        h.feed(bulk("v2"));
        REQUIRE(h.done(id));
        REQUIRE(h.answers.at(id).size() == 3);
        CHECK(text(h.answer(id, 0)) == "v1");
        CHECK(h.answer(id, 1).is_error());
        CHECK(text(h.answer(id, 2)) == "v2");
    }

    TEST_CASE("a multi-channel SUBSCRIBE is answered by its last confirmation") {
        harness h;
        int const sub = h.add(command("SUBSCRIBE", "a", "b", "c"));
        int const get = h.add(command("GET", "k"));
        h.feed(confirm("subscribe", "a", 1) + confirm("subscribe", "b", 2));
        CHECK_FALSE(h.done(sub));
        h.feed(confirm("subscribe", "c", 3));
        REQUIRE(h.done(sub));
        CHECK(is_confirmation(h.answer(sub), "subscribe", "c"));
        CHECK(h.pushes.size() == 3); // the listeners see the confirmations too
        h.feed(bulk("v"));
        CHECK(text(h.answer(get)) == "v");
    }

    TEST_CASE("messages interleaved with confirmations go to the listeners only") {
        harness h;
        int const get1 = h.add(command("GET", "k1"));
        int const sub = h.add(command("SUBSCRIBE", "a", "b"));
        int const get2 = h.add(command("GET", "k2"));
        h.feed(message("old", "m1") + bulk("v1") + message("old", "m2") +
               confirm("subscribe", "a", 2) + confirm("subscribe", "b", 3) + message("a", "m3") +
               bulk("v2") + message("b", "m4"));
        CHECK(h.unexpected == 0);
        CHECK(h.completed == std::vector<int>{get1, sub, get2});
        CHECK(text(h.answer(get1)) == "v1");
        CHECK(is_confirmation(h.answer(sub), "subscribe", "b"));
        CHECK(text(h.answer(get2)) == "v2");
        REQUIRE(h.pushes.size() == 6);
        CHECK(text(h.pushes[0].elements[2]) == "m1");
        CHECK(text(h.pushes[5].elements[2]) == "m4");
    }

    TEST_CASE("a confirmation nobody waits for answers nothing") {
        // An unsolicited SUNSUBSCRIBE (a Cluster slot moved) while a GET waits.
        harness h;
        int const get = h.add(command("GET", "k"));
        h.feed(confirm("sunsubscribe", "s", 0));
        CHECK_FALSE(h.done(get));
        CHECK(h.pushes.size() == 1);
        h.feed(bulk("v"));
        CHECK(text(h.answer(get)) == "v");
    }

    TEST_CASE("an unsolicited sunsubscribe of another channel does not confirm a SUNSUBSCRIBE") {
        // s2's slot moves (Redis Cluster) while SUNSUBSCRIBE s1 waits: the server drops s2 on
        // its own, with a push of the same kind as the confirmation s1 waits for.
        harness h;
        int const ssub = h.add(command("SSUBSCRIBE", "s1", "s2"));
        h.feed(confirm("ssubscribe", "s1", 1) + confirm("ssubscribe", "s2", 2));
        CHECK(h.done(ssub));
        int const sunsub = h.add(command("SUNSUBSCRIBE", "s1"));
        int const get = h.add(command("GET", "k"));
        h.feed(confirm("sunsubscribe", "s2", 1));
        CHECK_FALSE(h.done(sunsub));
        h.feed(confirm("sunsubscribe", "s1", 0));
        REQUIRE(h.done(sunsub));
        CHECK(is_confirmation(h.answer(sunsub), "sunsubscribe", "s1"));
        CHECK_FALSE(h.done(get));
        h.feed(bulk("v"));
        REQUIRE(h.done(get));
        CHECK(text(h.answer(get)) == "v");
        CHECK(h.unexpected == 0);
        CHECK(h.pushes.size() == 4); // the listeners see every push, the unsolicited one too
    }

    TEST_CASE("confirmations of a named command are matched by channel, repeats included") {
        harness h;
        int const ssub = h.add(command("SSUBSCRIBE", "s1", "s1", "s2"));
        h.feed(confirm("ssubscribe", "s1", 1) + confirm("ssubscribe", "s1", 1));
        CHECK_FALSE(h.done(ssub));
        h.feed(confirm("ssubscribe", "s2", 2));
        REQUIRE(h.done(ssub));
        CHECK(is_confirmation(h.answer(ssub), "ssubscribe", "s2"));
    }

    TEST_CASE("an argument-less UNSUBSCRIBE: one push per channel, done when none is left") {
        // SUBSCRIBE a b; PSUBSCRIBE p*; UNSUBSCRIBE; GET: the last unsubscribe push still
        // counts the pattern, so the count field never reaches 0 for it.
        harness h;
        int const sub = h.add(command("SUBSCRIBE", "a", "b"));
        int const psub = h.add(command("PSUBSCRIBE", "p*"));
        int const unsub = h.add(command("UNSUBSCRIBE"));
        int const get = h.add(command("GET", "k"));
        h.feed(confirm("subscribe", "a", 1) + confirm("subscribe", "b", 2) +
               confirm("psubscribe", "p*", 3) + confirm("unsubscribe", "b", 2));
        CHECK(h.done(sub));
        CHECK(h.done(psub));
        CHECK_FALSE(h.done(unsub));
        h.feed(confirm("unsubscribe", "a", 1));
        REQUIRE(h.done(unsub)); // at once, without waiting for what follows
        CHECK(is_confirmation(h.answer(unsub), "unsubscribe", "a"));
        h.feed(bulk("v"));
        CHECK(text(h.answer(get)) == "v");
    }

    TEST_CASE("an argument-less UN- form with nothing subscribed: one push with a null channel") {
        harness h;
        int const unsub = h.add(command("UNSUBSCRIBE"));
        int const punsub = h.add(command("PUNSUBSCRIBE"));
        int const sunsub = h.add(command("SUNSUBSCRIBE"));
        int const ping = h.add(command("PING"));
        h.feed(confirm("unsubscribe", "", 0) + confirm("punsubscribe", "", 0) +
               confirm("sunsubscribe", "", 0) + "+PONG\r\n");
        CHECK(h.completed == std::vector<int>{unsub, punsub, sunsub, ping});
        CHECK(is_confirmation(h.answer(unsub), "unsubscribe", ""));
        CHECK(text(h.answer(ping)) == "PONG");
    }

    TEST_CASE("two argument-less UNSUBSCRIBEs in a row: the null push starts the second") {
        harness h;
        h.add(command("SUBSCRIBE", "a"));
        int const first = h.add(command("UNSUBSCRIBE"));
        int const second = h.add(command("UNSUBSCRIBE"));
        h.feed(confirm("subscribe", "a", 1) + confirm("unsubscribe", "a", 0) +
               confirm("unsubscribe", "", 0));
        CHECK(is_confirmation(h.answer(first), "unsubscribe", "a"));
        CHECK(is_confirmation(h.answer(second), "unsubscribe", ""));
    }

    TEST_CASE("sharded channels are counted apart from the classic ones") {
        // SUBSCRIBE a; SSUBSCRIBE s1 s2; SUNSUBSCRIBE: the shard count reaches 0 while a stays.
        harness h;
        h.add(command("SUBSCRIBE", "a"));
        h.add(command("SSUBSCRIBE", "s1", "s2"));
        int const sunsub = h.add(command("SUNSUBSCRIBE"));
        int const unsub = h.add(command("UNSUBSCRIBE"));
        h.feed(confirm("subscribe", "a", 1) + confirm("ssubscribe", "s1", 1) +
               confirm("ssubscribe", "s2", 2) + confirm("sunsubscribe", "s2", 1) +
               confirm("sunsubscribe", "s1", 0));
        CHECK(h.done(sunsub));
        h.feed(confirm("unsubscribe", "a", 0));
        CHECK(h.done(unsub));
    }

    TEST_CASE("a count the matcher could not know: the next value ends the UN- form") {
        // A pattern subscription the matcher never saw confirmed makes it count one channel
        // too many: the UNSUBSCRIBE is still closed by the GET's reply, which goes to the GET.
        harness h;
        int const sub = h.add(command("SUBSCRIBE", "a"));
        int const unsub = h.add(command("UNSUBSCRIBE"));
        int const get = h.add(command("GET", "k"));
        h.feed(confirm("subscribe", "a", 2)); // 2: the unseen pattern counts too
        CHECK(h.done(sub));
        h.feed(confirm("unsubscribe", "a", 1));
        CHECK_FALSE(h.done(unsub));
        h.feed(bulk("v"));
        CHECK(h.done(unsub));
        CHECK(is_confirmation(h.answer(unsub), "unsubscribe", "a"));
        CHECK(text(h.answer(get)) == "v");
        CHECK(h.unexpected == 0);
    }

    TEST_CASE("a message after the confirmations of an open UN- form ends it too") {
        harness h;
        h.add(command("SUBSCRIBE", "a"));
        int const unsub = h.add(command("UNSUBSCRIBE"));
        h.feed(confirm("subscribe", "a", 2) + confirm("unsubscribe", "a", 1));
        CHECK_FALSE(h.done(unsub));
        h.feed(">4\r\n" + bulk("pmessage") + bulk("p*") + bulk("p1") + bulk("hi"));
        CHECK(h.done(unsub));
        CHECK(h.pushes.back().elements.size() == 4);
    }

    TEST_CASE("SUBSCRIBE inside MULTI is answered +QUEUED, its confirmation inside EXEC") {
        harness h;
        request r;
        r.push("MULTI");
        r.push("SUBSCRIBE", "a");
        r.push("GET", "k");
        r.push("EXEC");
        int const tx = h.add(r);
        int const unsub = h.add(command("UNSUBSCRIBE"));
        h.feed("+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n" + confirm("subscribe", "a", 1) + "_\r\n");
        REQUIRE(h.done(tx));
        CHECK(h.answers.at(tx).size() == 4);
        CHECK(text(h.answer(tx, 1)) == "QUEUED");
        // The count came from inside EXEC: the UNSUBSCRIBE is done with its only push.
        h.feed(confirm("unsubscribe", "a", 0));
        CHECK(h.done(unsub));
    }

    TEST_CASE("an error answers an UNSUBSCRIBE, named or not") {
        // -BUSY while a script runs refuses any of them.
        harness h;
        int const named = h.add(command("UNSUBSCRIBE", "a", "b"));
        int const bare = h.add(command("PUNSUBSCRIBE"));
        int const get = h.add(command("GET", "k"));
        std::string const busy = "BUSY Redis is busy running a script.";
        h.feed(simple_error(busy) + simple_error(busy) + bulk("v"));
        CHECK(h.answer(named).text == busy);
        CHECK(h.answer(bare).text == busy);
        CHECK(text(h.answer(get)) == "v");
    }

    TEST_CASE("a pipeline mixing everything, whole or a byte at a time") {
        std::string const busy = "BUSY Redis is busy running a script.";
        std::string const stream =
            bulk("v1") +                                                  // GET k1
            message("x", "early") +                                       //
            confirm("subscribe", "a", 1) + confirm("subscribe", "b", 2) + // SUBSCRIBE a b
            confirm("psubscribe", "p*", 3) + "+PONG\r\n" +                // PSUBSCRIBE; PING
            message("a", "m1") +                                          //
            simple_error(noperm) +                                        // SSUBSCRIBE (refused)
            confirm("unsubscribe", "b", 2) + confirm("unsubscribe", "a", 1) +    // UNSUBSCRIBE
            ">4\r\n" + bulk("pmessage") + bulk("p*") + bulk("p1") + bulk("m2") + //
            confirm("punsubscribe", "p*", 0) +                                   // PUNSUBSCRIBE
            simple_error(busy) +                                                 // UNSUBSCRIBE x
            bulk("v2");                                                          // GET k2
        for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{7}}) {
            CAPTURE(chunk);
            harness h;
            int const get1 = h.add(command("GET", "k1"));
            int const sub = h.add(command("SUBSCRIBE", "a", "b"));
            request psub;
            psub.push("PSUBSCRIBE", "p*");
            psub.push("PING");
            int const psub_ping = h.add(psub);
            int const ssub = h.add(command("SSUBSCRIBE", "s"));
            int const unsub = h.add(command("UNSUBSCRIBE"));
            int const punsub = h.add(command("PUNSUBSCRIBE"));
            int const unsub_x = h.add(command("UNSUBSCRIBE", "x"));
            int const get2 = h.add(command("GET", "k2"));
            h.feed(stream, chunk);
            CHECK(h.unexpected == 0);
            CHECK(h.completed ==
                  std::vector<int>{get1, sub, psub_ping, ssub, unsub, punsub, unsub_x, get2});
            CHECK(text(h.answer(get1)) == "v1");
            CHECK(is_confirmation(h.answer(sub), "subscribe", "b"));
            CHECK(is_confirmation(h.answer(psub_ping, 0), "psubscribe", "p*"));
            CHECK(text(h.answer(psub_ping, 1)) == "PONG");
            CHECK(h.answer(ssub).text == noperm);
            CHECK(is_confirmation(h.answer(unsub), "unsubscribe", "a"));
            CHECK(is_confirmation(h.answer(punsub), "punsubscribe", "p*"));
            CHECK(h.answer(unsub_x).text == busy);
            CHECK(text(h.answer(get2)) == "v2");
            CHECK(h.pushes.size() == 9); // 3 messages and 6 confirmations
            CHECK(h.matcher.empty());
        }
    }

    TEST_CASE("what nobody can take is unexpected; a push never is") {
        harness h;
        h.feed(bulk("stray"));
        CHECK(h.unexpected == 1);
        h.feed(message("a", "m"));
        CHECK(h.unexpected == 1);
        CHECK(h.pushes.size() == 1);

        // A SUBSCRIBE answered by something that is neither a push nor an error.
        harness s;
        s.add(command("SUBSCRIBE", "a"));
        s.feed("+OK\r\n");
        CHECK(s.unexpected == 1);
    }

    TEST_CASE("the handshake's own HELLO, unmatchable for users, is answered by one reply") {
        harness h;
        request r;
        r.push("HELLO", "3");
        r.push("PING");
        REQUIRE(r.shape(0).kind == reply_kind::unmatchable);
        int const hello = h.add(r);
        h.feed("%1\r\n" + bulk("proto") + ":3\r\n" + "+PONG\r\n");
        REQUIRE(h.done(hello));
        CHECK(h.answer(hello, 0).type == colock::resp3::type::map);
        CHECK(text(h.answer(hello, 1)) == "PONG");
        CHECK(h.unexpected == 0);
    }

    TEST_CASE("first_command: the bytes of the first command, and its arguments") {
        using colock::redis::detail::first_command;
        request r;
        r.push("SET", "k", std::string("a\r\nb"));
        r.push("GET", "k");
        auto const payload = r.payload();
        std::vector<std::string_view> args;
        std::size_t const size = first_command(payload, &args);
        request const get = command("GET", "k");
        CHECK(payload.substr(size) == get.payload());
        REQUIRE(args.size() == 2);
        CHECK(args[0] == "k");
        CHECK(args[1] == "a\r\nb");
        CHECK(first_command(payload.substr(size)) == payload.size() - size);
        // Cut anywhere inside, it is no whole command.
        for (std::size_t cut = 0; cut < size; ++cut)
            CHECK(first_command(payload.substr(0, cut)) == 0);
    }

    TEST_CASE("drop_back forgets the newest request; clear forgets all and the counts") {
        reply_matcher m;
        m.add(1, {});
        m.add(2, {});
        CHECK(m.size() == 2);
        m.drop_back();
        CHECK(m.size() == 1);
        value v;
        v.type = colock::resp3::type::simple_string;
        v.text = "OK";
        CHECK(m.feed(v) == reply_matcher::route::answer);
        REQUIRE(m.front_done());
        auto answers = m.take_front();
        REQUIRE(answers.size() == 1);
        CHECK(answers[0].text == "OK");
        CHECK(m.empty());

        request r = command("UNSUBSCRIBE");
        m.add(r.commands(), r.shapes());
        m.clear();
        CHECK(m.empty());
    }

} // TEST_SUITE
