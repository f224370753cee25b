// A store's reply that failed, for the unit tests of what reads the replies: any reply type
// with an error code and the server's text beside it (grant_result, lock_reading).
#pragma once

#include <boost/system/error_code.hpp>

#include <string>
#include <utility>

namespace colock::test {

template <class Reply>
Reply failed_reply(boost::system::error_code ec, std::string server_text = {}) {
    Reply r;
    r.ec = ec;
    r.server_text = std::move(server_text);
    return r;
}

} // namespace colock::test
