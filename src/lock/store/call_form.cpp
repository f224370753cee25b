#include "lock/store/call_form.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace colock::detail {

namespace {

bool contains_lower(std::string_view text, std::string_view lower_word) {
    auto const it = std::search(
        text.begin(), text.end(), lower_word.begin(), lower_word.end(),
        [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
    return it != text.end();
}

// The server lacks the script: NOSCRIPT for EVALSHA, "ERR Function not found" for FCALL.
bool is_missing(resp3::value const& answer, call_form form) {
    return form == call_form::sha ? answer.text.starts_with("NOSCRIPT")
                                  : answer.text.find("Function not found") != std::string::npos;
}

// The command itself refused: unknown (before Redis 7.0, a proxy) or not allowed (an ACL). Only
// such a refusal names the command; a script's own errors name the script or the function, and
// colock's start with "COLOCK".
bool refuses_command(resp3::value const& answer, std::string_view lower_name) {
    return answer.is_error() && !answer.text.starts_with("COLOCK") &&
           contains_lower(answer.text, lower_name);
}

} // namespace

bool refuses_sha(resp3::value const& answer) {
    return refuses_command(answer, "evalsha");
}

call_verdict judge_call(std::span<resp3::value const> answers, std::size_t answer_at, bool loaded,
                        call_form form) {
    if (answers.size() <= answer_at || !answers[answer_at].is_error())
        return {};
    auto const& answer = answers[answer_at];
    if (form == call_form::function) {
        // The library refused (an ACL without FUNCTION LOAD, a proxy, a server that cannot run
        // it). One that is there already is what the call needs.
        if (loaded && answer_at > 0 && answers[0].is_error() &&
            answers[0].text.find("already exists") == std::string::npos)
            return {call_verdict::fall_back, answers[0].text};
        if (refuses_command(answer, "fcall"))
            return {call_verdict::fall_back, answer.text};
    }
    if (!loaded && is_missing(answer, form))
        return {call_verdict::load_and_repeat, {}};
    return {};
}

} // namespace colock::detail
