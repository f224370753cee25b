// How a connection calls the scripts, and what a server's answer to a call means for the next
// one: pure, so that every answer a server or a proxy may give is tested without one. Private to
// the library's sources.
#pragma once

#include <colock/resp3/value.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace colock::detail {

// As Redis Functions (FCALL, the library loaded by FUNCTION LOAD) until the server refuses them,
// then by SHA (EVALSHA, the script loaded by SCRIPT LOAD). Chosen per connection, and only ever
// from the first to the second.
enum class call_form : std::uint8_t { function, sha };

// What to do after a call's answer.
struct call_verdict {
    enum kind_type {
        stands,          // the answer is the call's: a reply, or an error of its own
        load_and_repeat, // the server lacks the script (or the library): load it, ask again
        fall_back,       // Functions refused: by SHA from now on, and ask again
    } kind = stands;
    std::string_view refusal = {}; // fall_back: the server's words
};

// The answers of one request: `answers[answer_at]` is the call's, and when `loaded` the request
// began with the load, whose answer is `answers[0]`.
call_verdict judge_call(std::span<resp3::value const> answers, std::size_t answer_at, bool loaded,
                        call_form form);

// How a call's next request is sent: in which form, and whether it loads the script (or the
// library) first. Starts as the connection's form; each verdict moves it on, and only ever
// towards the end (load once, fall back once), so a call makes at most four requests.
struct call_attempt {
    call_form form;
    bool load = false;

    // After an answer judged `verdict`: true when another request follows (load and repeat, or
    // by SHA now), false when the answer stands.
    bool follow(call_verdict::kind_type verdict) noexcept {
        if (verdict == call_verdict::stands)
            return false;
        load = verdict == call_verdict::load_and_repeat;
        if (verdict == call_verdict::fall_back)
            form = call_form::sha;
        return true;
    }
};

// The text added to an EVALSHA refusal when Functions were refused before, so that the error
// says both ways are closed to this user.
inline constexpr std::string_view both_refused_hint =
    "; and Redis Functions were refused before (see the warning logged then): allow EVALSHA, or "
    "FCALL with colock's library loaded (docs/operations.md, \"Scripts and Functions\")";

// True when `answer` is a refusal of EVALSHA itself (an ACL, a proxy), as opposed to the
// script's own error.
bool refuses_sha(resp3::value const& answer);

} // namespace colock::detail
