# Loads a Homebrew formula under a stand-in for Homebrew's Formula DSL and
# prints, for each system it names, the archive Homebrew would download:
#
#   ruby homebrew-check.rb finalizer-guard.rb   # lines: OS ARCH URL SHA256
#
# What Homebrew itself would reject here (no class, no url for a system, a
# method the formula calls that the DSL has not) fails with an error.
class Formula
  class << self
    attr_reader :archives, :fields

    def selected(os, arch)
      @os, @arch = os, arch
      @fields = {}
      @archives = []
      @body.call
      @archives
    end

    def define(&body)
      @body = body
    end

    %i[desc homepage version license].each do |name|
      define_method(name) { |value| (@fields ||= {})[name] = value }
    end

    def on_macos
      yield if @os == "darwin"
    end

    def on_linux
      yield if @os == "linux"
    end

    def on_arm
      yield if @arch == "arm64"
    end

    def on_intel
      yield if @arch == "amd64"
    end

    def url(value)
      @archives << [value]
    end

    def sha256(value)
      @archives.last << value
    end

    def test(&block) = nil
  end
end

source = File.read(ARGV.fetch(0))
klass_name = source[/^class (\w+) < Formula$/, 1] or abort "no `class NAME < Formula` in #{ARGV[0]}"
body = source[/^class \w+ < Formula\n(.*)^end\s*\z/m, 1] or abort "the class does not end the file"
Object.const_set(klass_name, Class.new(Formula))
klass = Object.const_get(klass_name)
klass.define { klass.class_eval(body, ARGV[0], 2) }
%w[darwin linux].product(%w[arm64 amd64]).each do |os, arch|
  archives = klass.selected(os, arch)
  abort "#{os}/#{arch}: #{archives.length} archives (one url and sha256 each expected)" unless archives.length == 1
  url, sha = archives.first
  abort "#{os}/#{arch}: no sha256" unless sha&.match?(/\A\h{64}\z/)
  %i[desc homepage version license].each { |f| abort "no #{f}" unless klass.fields[f] }
  abort "no install method" unless klass.method_defined?(:install)
  puts [os, arch, url, sha].join(" ")
end
