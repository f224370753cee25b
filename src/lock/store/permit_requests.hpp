// A semaphore's requests over one connection: the semaphore scripts' keys and arguments, sent
// through the script client and read by permit_replies.hpp. The single-connection store serves
// its permit requests with these. Private to the library's sources.
#pragma once

#include "lock/store/lease_types.hpp"
#include "lock/store/permits.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace colock::detail {

class script_client;

// As lease_store's grant_permits, extend_permits, downgrade_permits, release_permits,
// release_permits_in_background and read_permits.
class permit_requests {
public:
    explicit permit_requests(std::shared_ptr<script_client> client) : client_(std::move(client)) {}

    boost::asio::awaitable<permit_grant> grant(semaphore_keys const& keys,
                                               permit_request const& request,
                                               boost::asio::cancellation_slot stop) const;
    boost::asio::awaitable<permit_extension> extend(semaphore_keys const& keys,
                                                    std::string const& token,
                                                    std::chrono::milliseconds ttl,
                                                    bool weigh) const;
    boost::asio::awaitable<lease_reply> downgrade(semaphore_keys const& keys,
                                                  std::string const& token) const;
    boost::asio::awaitable<lease_reply> release(semaphore_keys const& keys,
                                                std::string const& token, std::size_t permits,
                                                bool leave) const;
    void release_in_background(semaphore_keys const& keys, std::string const& token,
                               std::size_t permits, bool leave, std::function<void()> retry) const;
    boost::asio::awaitable<semaphore_reading> read(semaphore_keys const& keys,
                                                   std::size_t listed) const;

private:
    std::shared_ptr<script_client> const client_;
};

} // namespace colock::detail
