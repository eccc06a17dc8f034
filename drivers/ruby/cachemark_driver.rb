#!/usr/bin/env ruby
# frozen_string_literal: true

# cachemark's Ruby driver: Rails.cache (ActiveSupport::Cache) as Rails configures it —
# RedisCacheStore (redis-rb) for redis:// targets, MemCacheStore (Dalli) for memcached://.
# It speaks the driver protocol of docs/drivers.md on stdin/stdout: one JSON line per
# message, and when a message has "blob": N, exactly N raw bytes after its newline
# (little-endian integer arrays). cachemark pre-generates the op stream; this program only
# runs the timed loop and hands back per-op outcomes and latencies in bulk. Protocol 2: a phase
# comes in segments (protocol.json's x-segments) — the first "ops" before "go", and while a
# segment that says "more" runs, the next one already waits in stdin; at its end the driver
# sends that segment's results as a "part" and reads the next (a cycling batch: a part per
# pass). So it holds one segment and its results, and reads stdin only between segments.

require "json"
require "zlib"

PROTOCOL = 3
NAME = "ruby-activesupport"
OK, HIT, MISS, ERR = 0, 1, 2, 3

# Protocol bytes go to the real stdout; anything a library prints (Dalli logs to STDOUT)
# is sent to stderr, where cachemark keeps it for error messages.
$proto_out = STDOUT.dup.binmode
STDOUT.reopen(STDERR)
$proto_in = STDIN.binmode
$stop = false
$blob_in = String.new(capacity: 1 << 20, encoding: Encoding::BINARY)
trap("INT") { $stop = true } # Ctrl-C: the loop stops and reports what it ran

def send_msg(msg, blob = nil)
  msg = msg.merge("blob" => blob.bytesize) if blob
  $proto_out.write(JSON.generate(msg), "\n")
  $proto_out.write(blob) if blob
  $proto_out.flush
end

def read_msg
  line = $proto_in.gets or exit(0) # cachemark went away
  msg = JSON.parse(line)
  n = msg["blob"].to_i
  msg["_blob"] = n.positive? ? $proto_in.read(n, $blob_in) : "".b # one buffer, reused: unpacked at once
  msg
end

def library_versions
  versions = {}
  versions["activesupport"] = ActiveSupport::VERSION::STRING
  begin
    require "dalli"
    versions["dalli"] = Dalli::VERSION
  rescue LoadError
    nil
  end
  begin
    require "redis"
    versions["redis"] = Redis::VERSION
  rescue LoadError
    nil
  end
  versions
end

begin
  require "active_support"
  require "active_support/cache"
rescue LoadError => e
  send_msg("type" => "error", "kind" => "missing",
           "message" => "#{NAME}: activesupport is not installed (#{e.message}); " \
                        "install ruby-activesupport ruby-dalli ruby-redis (Debian) or gem install activesupport dalli redis")
  exit 3
end

# The run's keys, values and checks (docs/contracts.md: the self-verifying value format).
class Workload
  attr_reader :keys

  def initialize(setup)
    @ns = setup.fetch("namespace")
    @count = setup.fetch("keys")
    @keys = Array.new(@count) { |i| "#{@ns}#{i}" }
    @headers = Array.new(@count)
    sizes = setup.fetch("sizes")
    @kind, @sizes = sizes.fetch("kind"), sizes.fetch("sizes")
    max = [@sizes.max, 12].max
    period = setup.fetch("filler").b # the value format's filler, one period (x-value-format)
    @filler = period * ((max / period.bytesize) + 1)
  end

  def header(k)
    @headers[k] ||= format("cm:%08x:", Zlib.crc32(@keys[k])).b
  end

  def value(k, size)
    size <= 12 ? header(k).byteslice(0, size) : header(k) + @filler.byteslice(12, size - 12)
  end

  def value_for_key(key, size)
    head = format("cm:%08x:", Zlib.crc32(key)).b
    size <= 12 ? head.byteslice(0, size) : head + @filler.byteslice(12, size - 12)
  end

  def valid?(k, value)
    return false unless value.is_a?(String)

    size = value.bytesize
    allowed = @kind == "range" ? size.between?(@sizes[0], @sizes[1]) : @sizes.include?(size)
    allowed && value.b == value(k, size)
  end
end

# Rails.cache for one target, with the exceptions its failsafes swallow kept aside:
# Rails answers a failed read with nil and a failed write with false, as an app sees it;
# cachemark still counts them as errors.
class Cache
  attr_reader :store, :info
  attr_accessor :last_error

  def initialize(setup)
    scheme = setup.fetch("scheme") || "null" # null: no server, Rails' NullStore (docs/drivers.md)
    @last_error = nil
    timeout = setup.fetch("timeout_s", 5.0).to_f
    connect_timeout = setup.fetch("connect_timeout_s", 2.0).to_f
    servers = setup.fetch("servers")
    if scheme.start_with?("redis", "valkey")
      require "redis"
      require "active_support/cache/redis_cache_store"
      tls = setup["tls"] ? "rediss" : "redis"
      auth = setup["password"] ? "#{setup['username']}:#{setup['password']}@" : ""
      urls = servers.map { |h, p| "#{tls}://#{auth}#{h}:#{p}/#{setup.fetch('db', 0)}" }
      handler = ->(method:, returning:, exception:) { @last_error = exception }
      @store = ActiveSupport::Cache::RedisCacheStore.new(
        url: urls.size == 1 ? urls[0] : urls, connect_timeout: connect_timeout, read_timeout: timeout,
        write_timeout: timeout, error_handler: handler
      )
      @info = { "client" => "ActiveSupport::Cache::RedisCacheStore", "client_library" => "redis",
                "client_version" => Redis::VERSION }
    elsif scheme == "memcached"
      require "dalli"
      require "active_support/cache/mem_cache_store"
      Dalli.logger = Logger.new($stderr, level: Logger::ERROR)
      @store = ActiveSupport::Cache::MemCacheStore.new(
        servers.map { |h, p| "#{h}:#{p}" }, socket_timeout: timeout
      )
      cache = self
      # MemCacheStore's failsafe (rescue_error_with) logs and returns nil/false: keep the exception too.
      @store.singleton_class.prepend(Module.new do
        define_method(:rescue_error_with) do |fallback, &block|
          super(fallback) do
            block.call
          rescue Dalli::DalliError => e
            cache.last_error = e
            raise
          end
        end
        private :rescue_error_with
      end)
      @info = { "client" => "ActiveSupport::Cache::MemCacheStore", "client_library" => "dalli",
                "client_version" => Dalli::VERSION }
    elsif scheme == "memory"
      # one per process, as in every Rails app server process: each worker's cache is its own
      @store = ActiveSupport::Cache::MemoryStore.new
      @info = { "client" => "ActiveSupport::Cache::MemoryStore", "client_library" => "activesupport",
                "client_version" => ActiveSupport::VERSION::STRING }
    elsif scheme == "file"
      @store = ActiveSupport::Cache::FileStore.new(setup.fetch("path"))
      @info = { "client" => "ActiveSupport::Cache::FileStore", "client_library" => "activesupport",
                "client_version" => ActiveSupport::VERSION::STRING }
    elsif scheme == "null"
      # Rails' own do-nothing store: what the protocol and this loop cost (benchmarks/clients.py)
      @store = ActiveSupport::Cache::NullStore.new
      @info = { "client" => "ActiveSupport::Cache::NullStore", "client_library" => "activesupport",
                "client_version" => ActiveSupport::VERSION::STRING }
    else
      raise ArgumentError, "#{NAME} has no store for #{scheme}://"
    end
  end

  def take_error
    e = @last_error
    @last_error = nil
    e
  end
end

def error_kind(exc)
  name = exc.class.name.to_s
  text = "#{name} #{exc.message}".downcase
  return "timeout" if text.include?("timeout") || text.include?("timed out")
  return "connection" if exc.is_a?(SystemCallError) || exc.is_a?(IOError) || text.include?("connect") ||
                         text.include?("no server") || text.include?("network") || text.include?("down")
  return "server" if text.include?("error") || text.include?("too large") || text.include?("oom")

  name.split("::").last
end

# One driver process = one cachemark worker: one store, one connection.
class Driver
  def initialize
    @cache = nil
    @ops = nil
    @kinds = %w[verify dropped_write]
  end

  def kind_code(kind)
    index = @kinds.index(kind) || (@kinds << kind).size - 1
    ERR + index
  end

  def serve
    send_msg("type" => "hello", "protocol" => PROTOCOL, "driver" => NAME,
             "runtime" => "ruby #{RUBY_VERSION}", "runtime_detail" => RUBY_DESCRIPTION,
             "libraries" => library_versions)
    loop do
      msg = read_msg
      case msg["type"]
      when "setup" then setup(msg)
      when "prefill" then prefill(msg)
      when "ops" then load_ops(msg)
      when "go" then go(msg)
      when "bye"
        send_msg("type" => "bye")
        return
      else
        send_msg("type" => "error", "kind" => "protocol", "message" => "unknown message #{msg['type'].inspect}")
      end
    end
  end

  def setup(msg)
    @setup = msg
    @work = Workload.new(msg)
    @worker = msg.fetch("worker", 0)
    @ttl = msg["ttl_s"].to_f.positive? ? msg["ttl_s"].to_f.ceil : nil
    @write_opts = @ttl ? { expires_in: @ttl } : {}
    @many = msg.fetch("get_many_count", 10)
    @canaries = 0
    begin
      @cache = Cache.new(msg)
    rescue LoadError => e
      return send_msg("type" => "error", "kind" => "missing",
                      "message" => "#{NAME}: #{e.message}; install ruby-dalli / ruby-redis (Debian) or the gem")
    rescue StandardError => e
      return send_msg("type" => "error", "kind" => "setup", "message" => "#{e.class}: #{e.message}")
    end
    # ActiveSupport autoloads parts on first use (the first write loads Notifications: ~1.6 ms here);
    # a booted Rails app has them loaded, so loading them is start-up, not the first op's cost
    ActiveSupport.eager_load!
    send_msg({ "type" => "ready" }.merge(@cache.info))
  end

  def prefill(msg)
    n = msg.fetch("count")
    blob = msg["_blob"]
    ids = blob.byteslice(0, 4 * n).unpack("L<*")
    sizes = blob.byteslice(4 * n, 4 * n).unpack("L<*")
    store = @cache.store
    written = refused = 0
    sample = nil
    ids.each_with_index do |k, i|
      break if $stop

      ok = begin
        store.write(@work.keys[k], @work.value(k, sizes[i]), **@write_opts)
      rescue StandardError => e
        @cache.last_error = e
        false
      end
      err = @cache.take_error
      if ok && !err
        written += 1
      else
        refused += 1
        sample ||= err ? "#{err.class}: #{err.message}" : "write returned #{ok.inspect}"
      end
    end
    send_msg("type" => "prefilled", "written" => written, "refused" => refused, "error_sample" => sample,
             "interrupted" => $stop)
  end

  def load_ops(msg)
    @entries = msg.fetch("entries")
    unknown = @entries.flatten - %w[get set delete exists get_many]
    unless unknown.empty?
      return send_msg("type" => "error", "kind" => "unsupported",
                      "message" => "#{NAME} does not run #{unknown.uniq.join(', ')}")
    end
    segment(msg)
    send_msg("type" => "loaded", "count" => @op_entry.size)
  end

  # One batch or segment (x-segments): its arrays replace the last one's, so one segment is held.
  def segment(msg)
    n = msg.fetch("count")
    blob = msg["_blob"]
    @entries = msg.fetch("entries")
    @op_entry = blob.byteslice(0, n).unpack("C*")
    @op_key = blob.byteslice(n, 4 * n).unpack("L<*")
    @op_size = blob.byteslice(5 * n, 4 * n).unpack("L<*")
    @op_at = msg["schedule"] ? blob.byteslice(9 * n, 8 * n).unpack("Q<*") : nil
    @more = msg["more"] == true # another segment follows during go, sent ahead
  end

  # -- the ops: each returns an outcome code (OK, HIT, MISS, or an error code) ---------------
  def handler(steps, in_sequence: false)
    store, work = @cache.store, @work
    opts = @write_opts
    if steps.size > 1
      parts = steps.map { |s| handler([s], in_sequence: true) }
      # exists+get as an app writes it (reference 004): exist? then fetch; a "no" ends it as a miss
      return lambda do |key, k, value, verify|
        code = MISS
        parts.each_with_index do |part, i|
          code = part.call(key, k, value, verify)
          return code if code >= ERR || (steps[i] == "exists" && code != HIT)
        end
        code
      end
    end
    case steps[0]
    when "get"
      lambda do |key, k, _value, verify|
        @bytes_out += key.bytesize # bytes_out: the key of each step sent (and a write's value)
        v = in_sequence ? store.fetch(key) : store.read(key)
        return MISS if v.nil?

        @bytes_in += v.bytesize
        verify && !work.valid?(k, v) ? verify_failed(key, v) : HIT
      end
    when "set"
      lambda do |key, _k, value, _verify|
        @bytes_out += key.bytesize + value.bytesize
        store.write(key, value, **opts) ? OK : refused(key)
      end
    when "delete"
      lambda do |key, _k, _value, _verify|
        @bytes_out += key.bytesize
        r = store.delete(key)
        r == true || (r.is_a?(Integer) && r.positive?) ? HIT : MISS
      end
    when "exists"
      lambda do |key, _k, _value, _verify|
        @bytes_out += key.bytesize
        store.exist?(key) ? HIT : MISS
      end
    when "get_many"
      keys, count, many = work.keys, work.keys.size, @many
      lambda do |_key, k, _value, verify|
        names = Array.new(many) { |i| keys[(k + i) % count] }
        @many_names = names # every key is sent: counted after the clock
        found = store.read_multi(*names)
        found.each_value { |v| @bytes_in += v.bytesize }
        return MISS if found.size < many

        bad = verify && found.find { |name, v| !work.valid?((k + names.index(name)) % count, v) }
        bad ? verify_failed(bad[0], bad[1]) : HIT
      end
    end
  end

  def verify_failed(key, value)
    sample("verify", "#{key}: unexpected value of #{value.to_s.bytesize} B")
    kind_code("verify")
  end

  def refused(key)
    return OK if @cache.last_error # counted from the exception below

    sample("server", "#{key}: write returned false (not stored)")
    kind_code("server")
  end

  def sample(kind, text)
    @samples << "#{@entry_name}: #{kind}: #{text}"[0, 300] if @samples.size < 5
  end

  # A write read back at once (untimed, with its own key): a silently dropped write is an error.
  def canary(entry, size)
    @canaries += 1
    key = "#{@setup['namespace']}verify:#{@worker}:#{@canaries}"
    value = @work.value_for_key(key, size)
    store = @cache.store
    store.write(key, value, **@write_opts)
    back = store.read(key)
    store.delete(key)
    err = @cache.take_error
    kind = if err then error_kind(err)
           elsif back.nil? then "dropped_write"
           elsif back.b != value then "dropped_write"
           end
    return unless kind

    (@extra[[entry, kind]] += 1)
    sample(kind, err ? "#{err.class}: #{err.message}" : "#{key}: a value just written read back #{back ? 'different' : 'as a miss'}")
  rescue StandardError => e
    @extra[[entry, error_kind(e)]] += 1
  end

  # Runs the batch, a segment (or a pass through a cycling batch) at a time: between two, the
  # segment's results go out as a part and the next segment is read (x-segments); the timed loop
  # itself never touches stdin or stdout.
  def go(msg)
    clock = Process::CLOCK_MONOTONIC
    read_every = msg.fetch("verify_reads", 0).to_f.positive? ? (1 / msg["verify_reads"].to_f).to_i : 0
    write_every = msg.fetch("verify_writes", 0).to_f.positive? ? (1 / msg["verify_writes"].to_f).to_i : 0
    cycle = msg["cycle"] && !@op_at
    grace = msg["stop_after_failing_s"] ? (msg["stop_after_failing_s"].to_f * 1e9).to_i : nil
    keys = @work.keys
    work = @work
    cache = @cache
    @samples = []
    @extra = Hash.new(0)
    @bytes_in = @bytes_out = 0
    entries = nil
    bytes_in = []
    bytes_out = []
    reads = writes_done = 0
    missed = 0
    stopped = false
    halt = false # stopped inside the segment: the deadline, SIGINT or the error policy
    GC.start # the garbage of cachemark's messages and op arrays is collected before the phase, not in it
    cpu0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    start = Process.clock_gettime(clock, :nanosecond)
    deadline = msg["duration_s"] ? start + (msg["duration_s"].to_f * 1e9).to_i : nil
    last_ok = start
    failing_since = nil
    while true # one segment, or one pass through a cycling batch, at a time (not loop: no block scope)
      if entries != @entries # the first segment (the next ones of a phase have the same entries)
        entries = @entries
        fns = entries.map { |steps| handler(steps) }
        names = entries.map { |steps| steps.join("+") }
        writes = entries.map { |steps| steps.include?("set") }
        verifiable = entries.map { |steps| steps.last == "get" || steps.last == "get_many" }
        bytes_in.fill(0, bytes_in.size...entries.size)
        bytes_out.fill(0, bytes_out.size...entries.size)
      end
      n = @op_entry.size
      op_entry, op_key, op_size, op_at = @op_entry, @op_key, @op_size, @op_at
      outcomes = []
      starts = []
      lats = []
      i = 0
      while i < n
        e = op_entry[i]
        k = op_key[i]
        key = keys[k]
        value = writes[e] ? work.value(k, op_size[i]) : nil
        if op_at
          due = start + op_at[i] # at_ns: counted from go, across the segments
          if deadline && due >= deadline
            halt = true
            break
          end

          now = Process.clock_gettime(clock, :nanosecond)
          sleep((due - now) / 1e9) if due > now
        end
        verify = false
        if read_every.positive? && verifiable[e]
          reads += 1
          if reads >= read_every
            reads = 0
            verify = true
          end
        end
        @entry_name = names[e]
        @bytes_in = @bytes_out = 0
        @many_names = nil
        t0 = Process.clock_gettime(clock, :nanosecond)
        begin
          code = fns[e].call(key, k, value, verify)
          err = cache.last_error
        rescue StandardError => ex
          err = ex
        end
        t1 = Process.clock_gettime(clock, :nanosecond)
        if err
          cache.last_error = nil
          kind = error_kind(err)
          sample(kind, "#{err.class}: #{err.message}")
          code = kind_code(kind)
        end
        bytes_in[e] += @bytes_in
        bytes_out[e] += @bytes_out
        bytes_out[e] += @many_names.sum(&:bytesize) if @many_names
        outcomes << code
        starts << (t0 - start)
        lats << (t1 - t0)
        i += 1
        if code < ERR
          last_ok = t1
          failing_since = nil
          if write_every.positive? && writes[e] && code == OK
            writes_done += 1
            if writes_done >= write_every
              writes_done = 0
              canary(e, op_size[i - 1])
            end
          end
        else
          failing_since ||= t1
          if grace && t1 - [last_ok, failing_since].max >= grace
            stopped = halt = true
            break
          end
        end
        if $stop || (deadline && t1 >= deadline)
          halt = true
          break
        end
      end
      # The end of a segment with more, or of a pass: its results go out, and the loop goes on.
      break if halt || !(@more || (cycle && n.positive?))

      send_msg({ "type" => "part", "count" => outcomes.size, "error_kinds" => @kinds },
               outcomes.pack("C*") + starts.pack("Q<*") + lats.pack("Q<*"))
      next unless @more # cycling: the next pass through the same batch

      nxt = read_msg # sent ahead: already waiting in stdin
      unless nxt["type"] == "ops"
        return send_msg("type" => "error", "kind" => "protocol",
                        "message" => "expected the next segment ('ops') during go, got #{nxt['type'].inspect}")
      end
      segment(nxt) # replaces this segment's arrays: no "loaded" during go
    end
    finish = Process.clock_gettime(clock, :nanosecond)
    if op_at && deadline && i < n
      missed = op_at[i..].count { |at| start + at < deadline } # this segment's; cachemark adds the rest
    end
    cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu0
    # Stopped inside a segment with more: cachemark sent the next one ahead; read it and drop it
    # before done, so the next exchange starts clean.
    read_msg if halt && @more
    @more = false
    blob = outcomes.pack("C*") + starts.pack("Q<*") + lats.pack("Q<*")
    send_msg({ "type" => "done", "count" => outcomes.size, "wall_ns" => finish - start, "cpu_s" => cpu,
               "error_kinds" => @kinds, "extra_errors" => @extra.map { |(en, kd), c| [en, kd, c] },
               "error_samples" => @samples, "bytes_in" => bytes_in, "bytes_out" => bytes_out,
               "missed" => missed, "stopped_on_errors" => stopped, "interrupted" => $stop }, blob)
  end
end

Driver.new.serve
