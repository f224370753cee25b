// What a server's (or a proxy's) answer to a script call means for the next request, without a
// server: the answer stands, the script is loaded and the call repeated, or the connection falls
// back from Functions to EVALSHA.
#include "lock/store/call_form.hpp"

#include "value_builders.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace colock::detail;
using colock::resp3::value;
using colock::test::error_reply;
using colock::test::number;

namespace {

call_verdict::kind_type verdict_of(std::vector<value> const& answers, bool loaded, call_form form) {
    return judge_call(answers, answers.size() - 1, loaded, form).kind;
}

} // namespace

TEST_CASE("judge_call: a reply, or an error of the script's own, stands") {
    for (auto form : {call_form::function, call_form::sha}) {
        CHECK(verdict_of({number(1)}, false, form) == call_verdict::stands);
        for (auto const* text :
             {"COLOCK the lock key p{a} holds \"x\", which is not a lock state colock writes",
              "OOM command not allowed when used memory > 'maxmemory'.",
              "ERR The user executing the script can't run this command or subcommand script: "
              "colock_0123456789abcdef_acquire, on @user_function:3.",
              "NOPERM this user has no permissions to access one of the keys used as arguments",
              "READONLY You can't write against a read only replica.", "BUSY Redis is busy"})
            CHECK_MESSAGE(verdict_of({error_reply(text)}, false, form) == call_verdict::stands,
                          text);
    }
    // An empty answer list, or an index past it, stands as it is (the caller reads the shape).
    CHECK(judge_call({}, 0, false, call_form::function).kind == call_verdict::stands);
}

TEST_CASE("judge_call: a missing script or function is loaded and asked again, once") {
    CHECK(verdict_of({error_reply("ERR Function not found")}, false, call_form::function) ==
          call_verdict::load_and_repeat);
    CHECK(verdict_of({error_reply("NOSCRIPT No matching script. Please use EVAL.")}, false,
                     call_form::sha) == call_verdict::load_and_repeat);
    // Still missing after the load in the same request: the answer stands, no loop.
    CHECK(verdict_of({value{}, error_reply("ERR Function not found")}, true, call_form::function) ==
          call_verdict::stands);
    CHECK(verdict_of({value{}, error_reply("NOSCRIPT No matching script.")}, true,
                     call_form::sha) == call_verdict::stands);
    // Each form's "missing" is its own: NOSCRIPT to an FCALL is not a reason to load.
    CHECK(verdict_of({error_reply("NOSCRIPT No matching script.")}, false, call_form::function) ==
          call_verdict::stands);
}

TEST_CASE("judge_call: FCALL refused (unknown before 7.0 or to a proxy, an ACL) falls back to "
          "EVALSHA with the server's words") {
    for (auto const* text :
         {"ERR unknown command 'FCALL', with args beginning with: 'colock_x_acquire' '3' ",
          "ERR unknown command `fcall`, with args beginning with: ",
          "NOPERM this user has no permissions to run the 'fcall' command",
          "ERR command FCALL not supported by proxy"}) {
        auto const answers = std::vector<value>{error_reply(text)};
        auto const verdict = judge_call(answers, 0, false, call_form::function);
        CHECK_MESSAGE(verdict.kind == call_verdict::fall_back, text);
        CHECK(verdict.refusal == text);
        // By SHA, the same words are the script's error, not a reason to change again.
        CHECK(verdict_of(answers, false, call_form::sha) == call_verdict::stands);
    }
}

TEST_CASE("judge_call: FUNCTION LOAD refused falls back with the load's words; a library that is "
          "there already is no refusal") {
    std::vector<value> refused{
        error_reply("NOPERM this user has no permissions to run the 'function|load' command"),
        error_reply("ERR Function not found")};
    auto const verdict = judge_call(refused, 1, true, call_form::function);
    CHECK(verdict.kind == call_verdict::fall_back);
    CHECK(verdict.refusal == refused[0].text);

    std::vector<value> there{error_reply("ERR Library 'colock_0123456789abcdef' already exists"),
                             number(1)};
    CHECK(judge_call(there, 1, true, call_form::function).kind == call_verdict::stands);
    // Loaded meanwhile by another: the call's own error then stands.
    there[1] = error_reply("COLOCK the lock key p{a} holds \"x\"");
    CHECK(judge_call(there, 1, true, call_form::function).kind == call_verdict::stands);
}

TEST_CASE("refuses_sha: EVALSHA itself refused, not a script's error") {
    CHECK(refuses_sha(error_reply("NOPERM this user has no permissions to run the 'evalsha' "
                                  "command")));
    CHECK(refuses_sha(error_reply("ERR unknown command 'EVALSHA'")));
    CHECK_FALSE(refuses_sha(error_reply("COLOCK evalsha")));
    CHECK_FALSE(refuses_sha(number(1)));
    CHECK_FALSE(refuses_sha(error_reply("NOSCRIPT No matching script.")));
}

TEST_CASE("call_attempt: each verdict moves a call on, towards the end only: load once, fall "
          "back once, then the answer stands") {
    call_attempt attempt{call_form::function};
    CHECK_FALSE(attempt.load);
    CHECK(attempt.follow(call_verdict::load_and_repeat));
    CHECK(attempt.form == call_form::function);
    CHECK(attempt.load);
    // The load refused: by SHA, first without a load.
    CHECK(attempt.follow(call_verdict::fall_back));
    CHECK(attempt.form == call_form::sha);
    CHECK_FALSE(attempt.load);
    CHECK(attempt.follow(call_verdict::load_and_repeat));
    CHECK(attempt.load);
    // An answer that stands changes nothing and asks for no more.
    CHECK_FALSE(attempt.follow(call_verdict::stands));
    CHECK(attempt.form == call_form::sha);
    CHECK(attempt.load);
}
