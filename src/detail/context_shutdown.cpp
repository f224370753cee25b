#include "context_shutdown.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>

#include <algorithm>

namespace colock::detail {

void context_shutdown::watch(boost::asio::any_io_executor const& ex,
                             std::weak_ptr<holds_handlers> holder) {
    auto& ctx = boost::asio::query(ex, boost::asio::execution::context);
    boost::asio::use_service<context_shutdown>(ctx).add(std::move(holder));
}

void context_shutdown::add(std::weak_ptr<holds_handlers> holder) {
    std::lock_guard lock(mutex_);
    // Drop the entries of objects already gone, so the list stays as long as what lives.
    std::erase_if(holders_, [](auto const& h) { return h.expired(); });
    holders_.push_back(std::move(holder));
}

void context_shutdown::shutdown() {
    std::vector<std::weak_ptr<holds_handlers>> holders;
    {
        std::lock_guard lock(mutex_);
        holders.swap(holders_);
    }
    for (auto const& weak : holders)
        if (auto holder = weak.lock())
            holder->drop_handlers();
}

} // namespace colock::detail
