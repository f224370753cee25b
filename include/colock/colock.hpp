// The public surface of colock.
#pragma once

#include <colock/error.hpp>
#include <colock/lock_observer.hpp>
#include <colock/lock_options.hpp>
#include <colock/lock_status.hpp>
#include <colock/locker.hpp>
#include <colock/log.hpp>
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>
#include <colock/resp3/parser.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>
#include <colock/version.hpp>
