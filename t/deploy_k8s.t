# The Kubernetes manifests of deploy/k8s/ against the Kubernetes API
# schemas, offline: deploy/k8s/validate.cjs builds the kubernetes-models
# object of each document's kind and validates it (types, required
# fields, enums, formats), checks the field names against the types'
# declarations, refuses kinds it does not know, and parses the
# ConfigMap's JSON.  Then the same script on copies with a deliberate
# mistake each, which must fail: the validator really validates.
#
# Needs node and build/npm/node_modules/{kubernetes-models,yaml} (make
# npm-deps).  Without them the file is skipped, except when
# RLM_REQUIRE_NODE or CI is set (as .ci/run does): then it fails.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname basename);
use File::Spec ();
use File::Temp qw(tempdir);
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/..');
my $dir = "$top/deploy/k8s";
my $script = "$dir/validate.cjs";
my $modules = $ENV{RLM_NODE_MODULES} || "$top/build/npm/node_modules";

{
    my $required = grep { defined $_ && $_ ne '' && $_ ne '0'
                          && lc $_ ne 'false' }
                   @ENV{qw( RLM_REQUIRE_NODE CI )};
    my $why;

    my ($node) = grep { -x $_ }
                 map { File::Spec->catfile($_, 'node') } File::Spec->path;

    if (!defined $node) {
        $why = 'node is not installed (apt-get install nodejs npm)';
    } else {
        for my $p (qw( kubernetes-models yaml )) {
            next if -f "$modules/$p/package.json";
            $why = "the $p npm package is not in $modules (make npm-deps)";
            last;
        }
    }

    if (defined $why) {
        if ($required) {
            plan tests => 1;
            fail("manifest validation cannot run: $why;"
                 . ' RLM_REQUIRE_NODE or CI is set, so this is a failure');
            exit 1;
        }
        plan skip_all => $why;
    }
}

$ENV{NODE_PATH} = $modules;

# runs the validator -> (exit status, output)
sub validate {
    my @args = map { "'$_'" } @_;
    my $out = `node '$script' @args 2>&1`;
    return ($? >> 8, $out);
}

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or die "$f: $!";
    local $/;
    return <$fh>;
}

my @manifests = sort glob("$dir/*.yaml");
my %kinds;
for my $m (@manifests) {
    my $text = slurp($m);
    $kinds{$1}++ while $text =~ /^kind:\s*(\S+)/mg;
}

# what the deployment needs is there
for my $k (qw( Namespace RuntimeClass StatefulSet Service ConfigMap Secret
               PodDisruptionBudget ))
{
    ok($kinds{$k}, "deploy/k8s has a $k");
}
is($kinds{Service}, 2, 'two Services (headless peers, clients)');

# --- the manifests as shipped ------------------------------------------------

my ($rc, $out) = validate();
is($rc, 0, 'every manifest of deploy/k8s is valid') or diag($out);
my $docs = () = $out =~ /^ok /mg;
my $want = 0;
$want += $_ for values %kinds;
is($docs, $want, "... all $want documents checked") or diag($out);

# --- copies with one mistake each must fail ------------------------------

my $tmp = tempdir('rlm-k8s-XXXXXX', TMPDIR => 1, CLEANUP => 1);

my $sts = slurp("$dir/statefulset.yaml");
my $svc = slurp("$dir/services.yaml");
my $pdb = slurp("$dir/pdb.yaml");
my $cm = slurp("$dir/configmap.yaml");

my @broken = (
    [ 'replicas: "three" (a string for an integer)',
      'statefulset.yaml', $sts, qr/^  replicas: 2$/m,
      '  replicas: "three"', qr/replicas must be integer/ ],
    [ 'a misspelt kind',
      'pdb.yaml', $pdb, qr/^kind: PodDisruptionBudget$/m,
      'kind: PodDisruptionBudgett', qr/unknown kind "PodDisruptionBudgett"/ ],
    [ 'a kind in the wrong API group',
      'pdb.yaml', $pdb, qr{^apiVersion: policy/v1$}m,
      'apiVersion: apps/v1', qr/unknown kind/ ],
    [ 'a required field missing (a container without its name)',
      'statefulset.yaml', $sts, qr/^        - name: ngx-rlm\n          image:/m,
      "        - image:", qr/must have required property '?name'?/ ],
    [ 'an env value YAML 1.1 reads as a boolean',
      'statefulset.yaml', $sts, qr/^(\s+value: )"provider-small-model".*$/m,
      '              value: yes', qr/value must be string/ ],
    [ 'a duration where the schema wants seconds',
      'statefulset.yaml', $sts, qr/^            periodSeconds: 5$/m,
      '            periodSeconds: 5s', qr/periodSeconds must be integer/ ],
    [ 'a misspelt field name (replica)',
      'statefulset.yaml', $sts, qr/^  replicas: 2$/m,
      '  replica: 2', qr/unknown field spec\.replica$/ ],
    [ 'a misspelt field deep in the pod template (privilegd)',
      'statefulset.yaml', $sts, qr/^            privileged: true$/m,
      '            privilegd: true',
      qr/unknown field spec\.template\.spec\.containers\[0\]\.securityContext\.privilegd/ ],
    [ 'a field name in the wrong case (stringdata)',
      'secret.example.yaml', slurp("$dir/secret.example.yaml"),
      qr/^stringData:$/m, 'stringdata:', qr/unknown field stringdata/ ],
    [ 'routes.json in the ConfigMap is not JSON',
      'configmap.yaml', $cm, qr/"root_model": "provider-large-model",/,
      '"root_model": "provider-large-model"', qr/routes\.json/ ],
);

for my $b (@broken) {
    my ($what, $file, $text, $re, $repl, $msg) = @$b;
    my $copy = $text;
    ok($copy =~ s/$re/$repl/, "$what: the mistake is made in $file")
        or next;
    my $path = "$tmp/" . basename($file);
    open my $fh, '>', $path or die "$path: $!";
    print $fh $copy;
    close $fh;

    my ($brc, $bout) = validate($path);
    is($brc, 1, "$what: the validator fails") or diag($bout);
    like($bout, qr/^INVALID .*$msg/m, "$what: ... and says why")
        or diag($bout);
    unlink $path;
}

# an unknown document anywhere fails the whole run, not just its file
{
    open my $fh, '>', "$tmp/extra.yaml" or die;
    print $fh "apiVersion: example.invalid/v1\nkind: Widget\n"
              . "metadata:\n  name: w\n";
    close $fh;
    my ($xrc, $xout) = validate($dir, "$tmp/extra.yaml");
    is($xrc, 1, 'a foreign kind next to valid manifests fails the run')
        or diag($xout);
}

done_testing();
